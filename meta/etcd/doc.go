// Package etcd is the shared engine of the metadata store: a meta.Store on
// an etcd cluster, for several servers that share one view of the threads.
// Open it with Open and a Config (the cluster's endpoints and a key
// prefix, so several deployments share one cluster).
//
// Records are JSON values under the keys of meta/internal/keys, below the
// prefix; a record's revision is its etcd ModRevision and every
// compare-and-set is one etcd transaction (store.go). Threads' histories,
// which may be a megabyte, are listed a few to a response (history.go).
// Hosts' leases are etcd leases, and a pin lives as long as its host's
// lease (hosts.go). A request the cluster does not answer in time (an
// election, a member gone) fails with meta.ErrUnavailable. The client's
// zap lines go to hclog (zaplog.go).
//
// Its tests run the conformance suite (warren/meta/metatest) and what is
// etcd's own, on real etcd servers that internal/testenv.EtcdCluster
// starts (built from tools/etcd).
package etcd
