package identity

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// EndSessions ends every live session of user but except (a session id, or
// ""): after a password change or reset, and when the user is deleted. It
// walks the sessions bucket, which holds only live sessions.
func (s *Service) EndSessions(ctx context.Context, user, except string) error {
	kv, err := s.store.JetStream().KeyValue(ctx, eventstore.SessionsBucket)
	if err != nil {
		return fmt.Errorf("opening the sessions bucket: %w", err)
	}
	// The leader's keys: a listing through a watch could be served by a
	// replica still catching up and miss the newest sessions, which would
	// outlive the password change that should have ended them.
	keys, err := eventstore.WholeKeys(ctx, s.store.JetStream(), eventstore.SessionsBucket, "")
	if err != nil {
		return fmt.Errorf("listing sessions: %w", err)
	}
	var all []string
	for _, id := range keys {
		if id != except {
			all = append(all, id)
		}
	}
	var ids []string
	for _, id := range all {
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading session: %w", err)
		}
		if string(e.Value()) == user {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if err := s.sessions.End(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// RevokeUser ends everything a deleted user could still act with: its
// sessions, its password, its provider's standing and its API tokens (secrets and objects; the objects
// are deleted by actor under correlationID, as part of the user's deletion).
func (s *Service) RevokeUser(ctx context.Context, user, actor, correlationID string) error {
	if err := s.EndSessions(ctx, user, ""); err != nil {
		return err
	}
	if err := s.DeletePassword(ctx, user); err != nil {
		return err
	}
	if err := s.secrets.Delete(ctx, secretSSOUserPrefix+user); err != nil {
		return err
	}
	return s.RevokeTokens(ctx, user, actor, correlationID)
}

// RevokeTokens ends every API token of user: their secrets go and their
// objects are deleted by actor under correlationID. A password change does
// it unless the user keeps them explicitly: tokens made by whoever knew the
// old password must not outlive it.
func (s *Service) RevokeTokens(ctx context.Context, user, actor, correlationID string) error {
	for _, name := range s.tokensOf(user) {
		if err := s.RevokeAPIToken(ctx, name); err != nil {
			return err
		}
		ref := domain.ObjectRef(domain.APITokenKind, "", name)
		cmd := domain.Command{Op: domain.OpDelete, Ref: ref, Actor: actor, CorrelationID: correlationID, Now: s.cfg.Now()}
		_, err := s.store.Execute(ctx, cmd, eventstore.UpdateOptions{Hint: s.cache, Retries: 3})
		var de *domain.Error
		if err != nil && !(errors.As(err, &de) && de.Reason == domain.ReasonNotFound) {
			return fmt.Errorf("deleting API token %s: %w", name, err)
		}
	}
	return nil
}

// tokensOf names the API tokens user owns, as the cache knows them.
func (s *Service) tokensOf(user string) []string {
	toks, err := projections.List[domain.APIToken](s.cache, domain.APITokenKind, projections.ListOptions{})
	if err != nil {
		s.cfg.Log.Warn("listing API tokens", "err", err)
		return nil
	}
	var names []string
	for _, t := range toks {
		if t.Spec.User == user && t.Metadata.DeletionTimestamp == nil {
			names = append(names, t.Metadata.Name)
		}
	}
	return names
}

// TokenCount is how many API tokens user owns.
func (s *Service) TokenCount(user string) int { return len(s.tokensOf(user)) }

// MaxTokensPerUser is the cap on a user's API tokens (Config.MaxTokensPerUser).
func (s *Service) MaxTokensPerUser() int { return s.cfg.MaxTokensPerUser }
