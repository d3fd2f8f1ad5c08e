package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"warren/internal/toolserver"
)

// serveS3 runs the S3-compatible server of the tests (toolserver.StartS3:
// SeaweedFS built from tools/s3 into bin/, the first time only) with its
// data under dir, makes bucket, and writes to addrFile, once it serves,
// the server's host:port, its access key, its secret key and its pid, a
// line each, then the Unix sockets it makes in /tmp. It runs until
// SIGTERM or SIGINT, then kills the server by its pid and removes those
// sockets; it fails if the server exits first. The server is tied to
// this process, killed with it whatever kills it, but then leaves its
// sockets: the script removes them on exit.
func serveS3(dir, bucket, addrFile string) {
	bin, err := toolserver.S3.Binary(log.Printf)
	if err != nil {
		log.Fatalf("build the S3 server from %s: %v", toolserver.S3Dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	// Asked for before the server starts, so that a signal during its
	// start waits for it and stops it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	srv, err := toolserver.StartS3(bin, dir)
	if err != nil {
		log.Fatalf("start the S3 server: %v", err)
	}
	defer srv.Stop()
	if err := srv.MakeBucket(bucket); err != nil {
		srv.Stop()
		log.Fatal(err)
	}
	addr := fmt.Sprintf("%s\n%s\n%s\n%d\n", srv.Host, srv.AccessKey, srv.SecretKey, srv.Pid())
	for _, p := range srv.Sockets() {
		addr += p + "\n"
	}
	if err := os.WriteFile(addrFile+".tmp", []byte(addr), 0o600); err != nil {
		srv.Stop()
		log.Fatal(err)
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		srv.Stop()
		log.Fatal(err)
	}
	log.Printf("S3 server pid %d at %s, bucket %s, data in %s", srv.Pid(), srv.Host, bucket, srv.Dir)
	select {
	case sig := <-sigs:
		log.Printf("%v: stopping the S3 server", sig)
	case <-srv.Exited():
		srv.Stop()
		log.Fatalf("the S3 server exited; the end of its log:\n%s", srv.LogTail(20))
	}
}
