// Command mkimage writes a test image of the host's static busybox as an
// OCI image layout in a tar, for the tests that are not Go (the
// TypeScript provider's) to load into a daemon: warren image load.
//
//	mkimage -o FILE -name REF [-marker TEXT]
package main

import (
	"flag"
	"fmt"
	"os"

	"warren/internal/imagetest"
)

func main() {
	out := flag.String("o", "", "the archive to write")
	ref := flag.String("name", "", "the image's name, in the layout's ref.name annotation")
	marker := flag.String("marker", "test image", "what /marker, /etc/os-release's NAME and $IMAGE_NAME say")
	flag.Parse()
	if *out == "" || *ref == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -o FILE -name REF [-marker TEXT]")
		os.Exit(2)
	}
	if err := run(*out, *ref, *marker); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(out, ref, marker string) error {
	img, err := imagetest.MakeBusybox(marker)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return imagetest.SaveLayout(out, dir, img, ref)
}
