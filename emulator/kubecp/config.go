package kubecp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
)

// Config is what one control-plane node runs.
type Config struct {
	// Name is the node's hostname: the etcd member name.
	Name string
	// Address is the node's IP (127.0.x.y in the emulator). etcd serves on
	// :2379 and :2380, kube-apiserver on :6443, the controller manager on
	// :10257 and the scheduler on :10259, all of this IP only.
	Address string
	// DataDir is the node's own directory, owned by the caller: etcd's
	// data, certificates, kubeconfigs and logs (see the package doc).
	DataDir string
	// Endpoint is the cluster's control-plane endpoint (https://host:6443):
	// a name of the apiserver's certificate, the service account issuer and
	// the API audience.
	Endpoint string
	// ClusterName is the controller manager's --cluster-name.
	ClusterName string
	// ServiceCIDR is the service IP range; default 10.96.0.0/12.
	ServiceCIDR string
	// PodCIDR is the range node pod CIDRs are allocated from; default 10.244.0.0/16.
	PodCIDR string
	// DNSDomain is the cluster's DNS domain; default cluster.local.
	DNSDomain string
	// PKI is the cluster's CAs (PKIFromConfig).
	PKI PKI
	// Binaries are the components to run (FindBinaries).
	Binaries Binaries

	// Bootstrap starts a new one-member etcd cluster. Join are running
	// members to join the cluster through: the node is added as a learner,
	// starts with --initial-cluster-state=existing and is promoted once in
	// sync. At most one of them; with neither, DataDir must already hold a
	// member (a restart). A DataDir holding a member is always restarted
	// from its data, whatever they say; then Join, if given, serves to
	// promote a member an interrupted join left a learner.
	Bootstrap bool
	Join      []Member

	// Log receives every child's output, each line prefixed with
	// "[<component> <name>] "; default none (the files in DataDir/logs remain).
	Log io.Writer
}

func (c *Config) setDefaults() {
	if c.ServiceCIDR == "" {
		c.ServiceCIDR = "10.96.0.0/12"
	}
	if c.PodCIDR == "" {
		c.PodCIDR = "10.244.0.0/16"
	}
	if c.DNSDomain == "" {
		c.DNSDomain = "cluster.local"
	}
}

// Validate reports what makes the config unusable.
func (c *Config) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if ip := net.ParseIP(c.Address); ip == nil {
		errs = append(errs, fmt.Errorf("address %q is no IP", c.Address))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if u, err := url.Parse(c.Endpoint); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("endpoint %q is no https URL", c.Endpoint))
	}
	if c.Bootstrap && len(c.Join) > 0 {
		errs = append(errs, errors.New("bootstrap and join are exclusive"))
	}
	if c.Binaries.Etcd == "" || c.Binaries.APIServer == "" || c.Binaries.ControllerManager == "" || c.Binaries.Scheduler == "" {
		errs = append(errs, errors.New("binaries are not set (FindBinaries)"))
	}
	if len(c.PKI.KubeCA.Key) == 0 || len(c.PKI.EtcdCA.Key) == 0 || len(c.PKI.AggregatorCA.Key) == 0 || len(c.PKI.ServiceAccountKey) == 0 {
		errs = append(errs, errors.New("PKI is incomplete (PKIFromConfig)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("control plane config of %s: %w", c.Name, err)
	}
	return nil
}

func (c *Config) member() Member {
	return Member{
		Name:      c.Name,
		PeerURL:   "https://" + net.JoinHostPort(c.Address, "2380"),
		ClientURL: "https://" + net.JoinHostPort(c.Address, "2379"),
	}
}
