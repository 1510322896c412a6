package eventstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// In-process consumers of one event share its decoding; a slot reused by a
// later sequence holds that event, and bad data is an error, not a panic.
func TestSharedEventDecodesOncePerSequence(t *testing.T) {
	s := eventstoretest.Start(t).Store
	data := []byte(`{"type":"TenantCreated","action":"created","object":{"kind":"Tenant","metadata":{"name":"acme"}}}`)
	a, err := s.SharedEvent(7, data)
	require.NoError(t, err)
	b, err := s.SharedEvent(7, data)
	require.NoError(t, err)
	require.Same(t, a, b)
	require.Equal(t, "acme", a.Object.Metadata.Name)

	other := []byte(`{"type":"TenantCreated","action":"created","object":{"kind":"Tenant","metadata":{"name":"beta"}}}`)
	c, err := s.SharedEvent(7+4096, other)
	require.NoError(t, err)
	require.Equal(t, "beta", c.Object.Metadata.Name)
	d, err := s.SharedEvent(7, data)
	require.NoError(t, err)
	require.NotSame(t, a, d, "the slot was taken by a later sequence")
	require.Equal(t, "acme", d.Object.Metadata.Name)

	_, err = s.SharedEvent(8, []byte(`{"type":`))
	require.Error(t, err)
	_, err = s.SharedEvent(9, []byte(`{"type":"X"}`))
	require.ErrorContains(t, err, "no object")
}
