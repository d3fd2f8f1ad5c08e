// Command etcd is the etcd server that warren's tests run: etcd's own main,
// built from this module so the server and its many dependencies stay out
// of warren's go.mod. internal/testenv builds it on demand (EtcdCluster).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
