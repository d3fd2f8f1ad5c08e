// Command loopback serves go-fuse's stock loopback filesystem, unchanged, so
// that the benchmark can measure it beside native ext4 and warren.
//
// Usage:
//
//	loopback BACKING MOUNTPOINT
//
// It mounts fs.NewLoopbackRoot(BACKING) at MOUNTPOINT with the options of
// go-fuse's own example/loopback (1 s entry and attribute timeouts, which
// match libfuse's defaults), mounting directly when run as root. It prints
// "mounted" once the mount serves, and unmounts and exits on SIGTERM or
// SIGINT.
package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("loopback: ")
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: loopback BACKING MOUNTPOINT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		log.Fatal(err)
	}
}

func run(backing, mountpoint string) error {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return fmt.Errorf("loopback root %s: %w", backing, err)
	}
	sec := time.Second
	opts := &fs.Options{
		AttrTimeout:     &sec,
		EntryTimeout:    &sec,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			DirectMount: os.Geteuid() == 0,
			FsName:      backing,
			Name:        "loopback",
		},
	}
	server, err := fs.Mount(mountpoint, root, opts)
	if err != nil {
		return fmt.Errorf("mount %s: %w", mountpoint, err)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		server.Wait()
	}()
	fmt.Println("mounted")

	select {
	case <-sigs:
		if err := server.Unmount(); err != nil {
			// Busy: detach it so the process can still exit; the
			// kernel finishes the unmount when the last user leaves.
			if lerr := syscall.Unmount(mountpoint, syscall.MNT_DETACH); lerr != nil {
				return fmt.Errorf("unmount %s: %w (lazy: %v)", mountpoint, err, lerr)
			}
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("unmount %s: server still busy after 5 s", mountpoint)
		}
	case <-done:
		// Unmounted from outside (umount): nothing left to do.
	}
	return nil
}
