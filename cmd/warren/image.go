package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

// imageCmd manages the daemon's image store: warren image pull|ls|rm|load.
func imageCmd(ctx context.Context, e *cli.Env, args []string) error {
	const usage = "usage: warren image pull REF | ls | rm REF | load [--name REF] FILE"
	if len(args) == 0 {
		return cli.Usagef(usage)
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		// Each command's usage, its flags with it.
		fmt.Fprintln(e.Stderr, usage)
		for _, sub := range []func(context.Context, *cli.Env, []string) error{imagePull, imageList, imageRemove, imageLoad} {
			_ = sub(ctx, e, []string{"-h"})
		}
		return flag.ErrHelp
	case "pull":
		return imagePull(ctx, e, rest)
	case "ls", "list":
		return imageList(ctx, e, rest)
	case "rm", "remove":
		return imageRemove(ctx, e, rest)
	case "load":
		return imageLoad(ctx, e, rest)
	}
	return cli.Usagef("warren image: unknown command %q: want pull, ls, rm or load", sub)
}

// imageFlags are an image verb's flags, --socket among them.
type imageFlags struct {
	*flag.FlagSet
	socket string
}

func newImageFlags(e *cli.Env, name, usage string) *imageFlags {
	fs := &imageFlags{FlagSet: cli.NewFlags(e, name, usage)}
	clientFlags(e, fs.FlagSet, &fs.socket)
	return fs
}

// oneArg parses fs's flags and returns its one argument.
func oneArg(fs *imageFlags, args []string, what string) (string, error) {
	rest, err := cli.Parse(fs.FlagSet, args)
	if err != nil {
		return "", err
	}
	if len(rest) != 1 || rest[0] == "" {
		return "", cli.Usagef("want one %s, got %d arguments", what, len(rest))
	}
	return rest[0], nil
}

func imagePull(ctx context.Context, e *cli.Env, args []string) error {
	fs := newImageFlags(e, "warren image pull", "[--json] REF")
	asJSON := fs.Bool("json", false, "print the image as JSON")
	ref, err := oneArg(fs, args, "image reference")
	if err != nil {
		return err
	}
	ctx, end := withProgressBar(ctx, e)
	img, err := client.New(fs.socket).Images().Pull(ctx, ref)
	end()
	if err != nil {
		return callError(fs.socket, "pull "+ref, err)
	}
	return printImage(e, img, *asJSON)
}

func imageLoad(ctx context.Context, e *cli.Env, args []string) error {
	fs := newImageFlags(e, "warren image load", "[--name REF] [--json] FILE")
	name := fs.String("name", "", "the image's name (default: the archive's own)")
	asJSON := fs.Bool("json", false, "print the image as JSON")
	path, err := oneArg(fs, args, "archive")
	if err != nil {
		return err
	}
	// The daemon reads the archive: a relative path is this shell's.
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	ctx, end := withProgressBar(ctx, e)
	img, err := client.New(fs.socket).Images().Load(ctx, abs, *name)
	end()
	if err != nil {
		return callError(fs.socket, "load "+path, err)
	}
	return printImage(e, img, *asJSON)
}

func imageRemove(ctx context.Context, e *cli.Env, args []string) error {
	fs := newImageFlags(e, "warren image rm", "REF")
	ref, err := oneArg(fs, args, "image reference")
	if err != nil {
		return err
	}
	if err := client.New(fs.socket).Images().Remove(ctx, ref); err != nil {
		return callError(fs.socket, "remove "+ref, err)
	}
	return nil
}

func imageList(ctx context.Context, e *cli.Env, args []string) error {
	fs := newImageFlags(e, "warren image ls", "[--json]")
	asJSON := fs.Bool("json", false, "print the images as JSON")
	rest, err := cli.Parse(fs.FlagSet, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	resp, err := client.New(fs.socket).Images().List(ctx)
	if err != nil {
		return callError(fs.socket, "list images", err)
	}
	if *asJSON {
		return encodeJSON(e, resp)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tDIGEST\tSIZE\tTHREADS")
	for _, img := range resp.Images {
		threads := "-"
		if len(img.Threads) > 0 {
			threads = strings.Join(img.Threads, ",")
		}
		ref := img.Ref
		if img.Loaded {
			ref += " (loaded)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ref, shortDigest(img.Digest), showBytes(img.Bytes), threads)
	}
	return tw.Flush()
}

// shortDigest is a digest as a person reads it: its first 12 digits.
func shortDigest(d string) string {
	if hex, ok := strings.CutPrefix(d, "sha256:"); ok && len(hex) > 12 {
		return "sha256:" + hex[:12]
	}
	return d
}

func printImage(e *cli.Env, img api.Image, asJSON bool) error {
	if asJSON {
		return encodeJSON(e, img)
	}
	_, err := fmt.Fprintf(e.Stdout, "%s %s %s\n", img.Ref, img.Digest, showBytes(img.Bytes))
	return err
}

func encodeJSON(e *cli.Env, v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
