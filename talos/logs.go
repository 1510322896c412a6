package talos

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/projections"
)

// LogConfig configures a LogReader. Cache and PKI are required; every other
// field's default is documented beside it.
type LogConfig struct {
	Cache *projections.Cache
	PKI   BundleSource
	// Port is the Talos API port of every machine; default 50000.
	Port int
	// FirstAnswer bounds the wait for a node's first answer (a chunk, the end
	// of the stream or an error) before the stream is handed over, so a
	// refusal becomes an error answer rather than an empty log; default 5 s.
	// A node that says nothing within it is unreachable, except for a followed
	// log, which is handed over then (there may be nothing new yet).
	FirstAnswer time.Duration
	// DialOptions are added to every connection to a machine.
	DialOptions []grpc.DialOption
}

func (c *LogConfig) setDefaults() {
	if c.Port == 0 {
		c.Port = 50000
	}
	if c.FirstAnswer == 0 {
		c.FirstAnswer = 5 * time.Second
	}
}

// LogReader reads machines' service logs and kernel messages through the real
// Talos API, over mTLS with a short-lived os:reader certificate from the
// tenant's PKI: read-only, the least role that may read them.
type LogReader struct {
	cfg LogConfig
}

// NewLogReader returns a LogReader.
func NewLogReader(cfg LogConfig) *LogReader {
	cfg.setDefaults()
	return &LogReader{cfg: cfg}
}

// Logs streams the log of one service (apid, machined, kubelet, etcd, ...) of
// a machine: its last tailLines lines (-1 for all the node keeps), then, with
// follow, new lines as they come until ctx ends, the reader is closed or the
// node ends the stream. Errors are domain errors: an unknown machine or service
// is NotFound, a machine without an address a Conflict, a node that cannot be
// reached or refuses ServiceUnavailable.
func (r *LogReader) Logs(ctx context.Context, tenant, machineName, service string, follow bool, tailLines int32) (io.ReadCloser, error) {
	return r.open(ctx, tenant, machineName, "the "+service+" log", follow, func(ctx context.Context, c *client.Client) (recvFunc, error) {
		s, err := c.Logs(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, service, follow, tailLines)
		if err != nil {
			return nil, err
		}
		return s.Recv, nil
	})
}

// Dmesg streams a machine's kernel messages, then, with follow, new ones
// until ctx ends, the reader is closed or the node ends the stream. Errors are
// those of Logs.
func (r *LogReader) Dmesg(ctx context.Context, tenant, machineName string, follow bool) (io.ReadCloser, error) {
	return r.open(ctx, tenant, machineName, "the kernel messages", follow, func(ctx context.Context, c *client.Client) (recvFunc, error) {
		s, err := c.Dmesg(ctx, follow, false)
		if err != nil {
			return nil, err
		}
		return s.Recv, nil
	})
}

type recvFunc func() (*common.Data, error)

// open connects to the machine, starts the stream and waits for its first
// answer, so an error the node answers with comes back as an error.
func (r *LogReader) open(ctx context.Context, tenant, machineName, what string, follow bool, start func(context.Context, *client.Client) (recvFunc, error)) (io.ReadCloser, error) {
	m, err := getTyped[domain.Machine](r.cfg.Cache, domain.ObjectRef(domain.MachineKind, tenant, machineName))
	if err != nil {
		return nil, err
	}
	if m.Spec.Address == "" {
		return nil, domain.NewConflict(domain.MachineKind.Kind, machineName, "it has no address yet, so its Talos API cannot be reached")
	}
	b, err := r.cfg.PKI.Bundle(ctx, tenant)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := readerTLS(b, tenant)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(m.Spec.Address, strconv.Itoa(r.cfg.Port))
	ctx, cancel := context.WithCancel(ctx)
	c, err := client.New(ctx, client.WithEndpoints(addr), client.WithTLSConfig(tlsCfg), client.WithGRPCDialOptions(r.cfg.DialOptions...))
	if err != nil {
		cancel()
		return nil, unreachable(machineName, addr, what, err)
	}
	// Opening the stream waits for the connection; bound it like the first answer.
	openCtx, openCancel := context.WithTimeout(ctx, r.cfg.FirstAnswer)
	stop := context.AfterFunc(openCtx, func() {
		if errors.Is(openCtx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	recv, err := start(ctx, c)
	stop()
	openCancel()
	if err != nil {
		cancel()
		c.Close() //nolint:errcheck // nothing was written through it
		return nil, nodeError(machineName, addr, what, err)
	}
	pr, pw := io.Pipe()
	s := &logStream{PipeReader: pr, cancel: cancel, done: make(chan struct{}), client: c}
	first := make(chan error, 1)
	go s.pump(ctx, recv, pw, first)
	timer := time.NewTimer(r.cfg.FirstAnswer)
	defer timer.Stop()
	select {
	case err := <-first:
		if err != nil {
			s.Close() //nolint:errcheck // it only stops the stream
			return nil, nodeError(machineName, addr, what, err)
		}
	case <-timer.C:
		if !follow {
			s.Close() //nolint:errcheck // it only stops the stream
			return nil, unreachable(machineName, addr, what, status.Error(codes.DeadlineExceeded, "no answer"))
		}
		// Nothing yet: a followed log with nothing new; hand it over.
	case <-ctx.Done():
		s.Close() //nolint:errcheck // it only stops the stream
		return nil, ctx.Err()
	}
	return s, nil
}

// logStream is a node's stream as a reader; closing it ends the call.
type logStream struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	client *client.Client
	once   sync.Once
}

// pump copies the stream's chunks into pw. The first answer goes to first:
// nil for a chunk or the end of the stream, else the error (open then
// answers it and closes the stream). A later error ends the reader with it.
func (s *logStream) pump(ctx context.Context, recv recvFunc, pw *io.PipeWriter, first chan<- error) {
	defer close(s.done)
	answered := false
	answer := func(err error) {
		if !answered {
			answered = true
			if errors.Is(err, io.EOF) {
				err = nil
			}
			first <- err
		}
	}
	for {
		d, err := recv()
		if err == nil && d.GetMetadata().GetError() != "" {
			err = errors.New(d.GetMetadata().GetError())
		}
		if err != nil {
			answer(err)
			if errors.Is(err, io.EOF) || ctx.Err() != nil || status.Code(err) == codes.Canceled {
				pw.Close() //nolint:errcheck // always nil
			} else {
				pw.CloseWithError(fmt.Errorf("the node ended the stream: %w", err)) //nolint:errcheck // always nil
			}
			return
		}
		answer(nil)
		if len(d.GetBytes()) == 0 {
			continue
		}
		if _, err := pw.Write(d.GetBytes()); err != nil {
			return
		}
	}
}

// Close ends the call and waits for it.
func (s *logStream) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.PipeReader.Close() //nolint:errcheck // always nil
		<-s.done
		s.client.Close() //nolint:errcheck // nothing was written through it
	})
	return nil
}

// readerTLS is the mTLS configuration of a read-only call: the tenant's OS CA
// as the only trusted root and a short-lived os:reader client certificate.
func readerTLS(b *secrets.Bundle, tenant string) (*tls.Config, error) {
	crt, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Reader), time.Hour)
	if err != nil {
		return nil, fmt.Errorf("issuing a reader client certificate for tenant %s: %w", tenant, err)
	}
	pair, err := tls.X509KeyPair(crt.Crt, crt.Key)
	if err != nil {
		return nil, fmt.Errorf("loading the reader client certificate for tenant %s: %w", tenant, err)
	}
	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM(b.Certs.OS.Crt) {
		return nil, fmt.Errorf("the os ca of tenant %s is not a pem certificate", tenant)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// nodeError turns what a node (or the way to it) answered into a domain
// error: NotFound for what it does not have, ServiceUnavailable otherwise.
func nodeError(machineName, addr, what string, err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.NotFound {
		return &domain.Error{Reason: domain.ReasonNotFound, Kind: domain.MachineKind.Kind, Name: machineName,
			Message: fmt.Sprintf("machine %q has no %s: %s", machineName, strings.TrimPrefix(what, "the "), st.Message())}
	}
	if ok && (st.Code() == codes.PermissionDenied || st.Code() == codes.Unauthenticated) {
		return &domain.Error{Reason: domain.ReasonServiceUnavailable, Kind: domain.MachineKind.Kind, Name: machineName,
			Message: fmt.Sprintf("the talos api of machine %q (%s) refused to serve %s: %s", machineName, addr, what, st.Message())}
	}
	return unreachable(machineName, addr, what, err)
}

func unreachable(machineName, addr, what string, err error) error {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
		if desc, found := strings.CutPrefix(msg, "connection error: desc = "); found {
			if u, uerr := strconv.Unquote(desc); uerr == nil {
				msg = u
			} else {
				msg = desc
			}
		}
		if st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled {
			msg = "no answer in time"
		}
	}
	return &domain.Error{Reason: domain.ReasonServiceUnavailable, Kind: domain.MachineKind.Kind, Name: machineName, RetryAfterSeconds: 5,
		Message: fmt.Sprintf("cannot read %s of machine %q: its talos api (%s) is unreachable: %s", what, machineName, addr, msg)}
}
