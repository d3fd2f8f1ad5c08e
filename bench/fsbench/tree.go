package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// treeInfo describes the source tree inside the tarball.
type treeInfo struct {
	top     string // the tree's top folder, e.g. "src"
	entries int    // everything below top: files, folders, links
	files   int    // regular files below top
	bytes   int64  // their total size
}

// readTarIndex reads the tarball's headers. The tree must sit under one
// top folder, as `tar -C /usr/local/go -cf gosrc.tar src` makes it.
func readTarIndex(path string) (treeInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return treeInfo{}, fmt.Errorf("tarball: %w", err)
	}
	defer f.Close()
	var t treeInfo
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return treeInfo{}, fmt.Errorf("tarball %s: %w", path, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		top, rest, _ := strings.Cut(strings.TrimSuffix(name, "/"), "/")
		if t.top == "" {
			t.top = top
		}
		if top != t.top {
			return treeInfo{}, fmt.Errorf("tarball %s: more than one top folder (%q, %q)", path, t.top, top)
		}
		if rest == "" {
			continue
		}
		t.entries++
		if h.Typeflag == tar.TypeReg {
			t.files++
			t.bytes += h.Size
		}
	}
	if t.top == "" {
		return treeInfo{}, fmt.Errorf("tarball %s: empty", path)
	}
	return t, nil
}

// statTree lstat's every entry below dir, folder by folder, the way a
// build tool or `git status` visits a tree, and returns how many it saw.
func statTree(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			return n, err
		}
		n++
		if fi.IsDir() {
			m, err := statTree(p)
			n += m
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// untar unpacks the tarball into dir, which must exist.
func (b *bench) untar(dir string) error {
	_, err := b.command(dir, nil, "tar", "-xf", b.cfg.tarball)
	return err
}

// checkTree counts the entries of the tree unpacked under dir.
func (b *bench) checkTree(dir string) error {
	n, err := statTree(filepath.Join(dir, b.tree.top))
	if err != nil {
		return fmt.Errorf("count unpacked tree: %w", err)
	}
	if n != b.tree.entries {
		return fmt.Errorf("unpacked tree has %d entries, the tarball %d", n, b.tree.entries)
	}
	return nil
}

// ensureTree unpacks the tree once into s.dir/tree (untimed) for the
// workloads that read it.
func (b *bench) ensureTree(s *system) error {
	if s.treeReady || s.treeErr != nil {
		return s.treeErr
	}
	s.treeErr = b.makeTree(s)
	s.treeReady = s.treeErr == nil
	return s.treeErr
}

func (b *bench) makeTree(s *system) error {
	dir := filepath.Join(s.dir, "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := b.untar(dir); err != nil {
		return err
	}
	return b.checkTree(dir)
}

// ensureGit makes s.dir/tree a git repository with the whole tree
// committed (untimed), so that `git status` has an index to compare with.
//
// On native this is git init, add -A and commit, then a repack into one
// pack file. Every other system gets a copy of that .git folder and a
// refreshed index: the same repository and a clean status, without the
// minutes that writing 11k loose objects through a slow FUSE mount takes.
func (b *bench) ensureGit(s *system) error {
	if s.gitReady || s.gitErr != nil {
		return s.gitErr
	}
	s.gitErr = b.makeGit(s)
	s.gitReady = s.gitErr == nil
	return s.gitErr
}

func (b *bench) makeGit(s *system) error {
	if err := b.ensureTree(s); err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "tree")
	native := b.systems[0]
	steps := [][]string{{"update-index", "-q", "--refresh"}}
	if s == native {
		steps = [][]string{
			{"init", "-q"},
			{"add", "-A"},
			{"commit", "-q", "-m", "fsbench tree"},
			{"repack", "-a", "-d", "-q"},
			{"prune-packed"},
		}
	} else {
		if !native.gitReady {
			return fmt.Errorf("no repository to copy: the git set-up failed on native")
		}
		seed := filepath.Join(native.dir, "tree", ".git")
		if _, err := b.command(dir, nil, "cp", "-a", seed, "."); err != nil {
			return err
		}
	}
	for _, args := range steps {
		if _, err := b.git(dir, args...); err != nil {
			return err
		}
	}
	return nil
}
