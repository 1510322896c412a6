package eventstore

import "slices"

// ServerName is the name of the embedded NATS node.
func (e *Embedded) ServerName() string { return e.srv.Name() }

// PeerNames names this node and the nodes of its cluster it has routes
// to now, sorted: the replicas that run on this data with embedded nodes
// (ReplicasConfig.Peers).
func (e *Embedded) PeerNames() []string {
	names := []string{e.srv.Name()}
	if rz, err := e.srv.Routez(nil); err == nil {
		for _, r := range rz.Routes {
			if r.RemoteName != "" && !slices.Contains(names, r.RemoteName) {
				names = append(names, r.RemoteName)
			}
		}
	}
	slices.Sort(names)
	return names
}
