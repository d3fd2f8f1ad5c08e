// Command imagebench measures per-thread images: what pulling an image
// costs, what running a thread on one costs, and what one image costs on
// disk for many threads; each figure side by side with what it is held
// against, with the ratio, medians of several runs:
//
//   - pull:  the pull and unpack of an image of about -mib MiB from a
//     loopback registry, `skopeo copy` to an OCI layout then `umoci
//     unpack` against `warren image pull` (target: warren faster);
//   - first: a new thread's bind and first `true`, on the image against on
//     the host's folders, -firsts new threads each (target: within 1.2x);
//   - warm:  `true` in a thread whose jail runs, on the image against on
//     the host's folders, -execs each (target: the same);
//   - disk:  -many threads bound on the image with a command run in each,
//     and the store's bytes on disk against one copy per thread.
//
// The image is built here from the host's own files, in layers as a real
// image has them: the host's static busybox (a shell for the jail's
// commands), then a part of /usr/lib/x86_64-linux-gnu (shared libraries,
// a few of several MiB), of /usr/lib/python3.* (many small sources) and of
// /usr/share (documentation, data): the first files of each in lexical
// order up to its layer's share of -mib, a file larger than a quarter of
// that share left out (one library must not be the whole layer). Each pull
// gets an image of its own, the same layers under a config that differs
// (a variable), so that no run finds the last one's image nor needs it
// removed: every run unpacks into a fresh tree, and no tree is removed
// while others are made (a removal slows an ext4's inode allocation for a
// while after, see bench/README.md).
//
// The registry is go-containerregistry's, in memory, served by this
// program in its -registry mode, which the script starts first so that
// the daemon can be started with --registries naming it. bench/image.sh
// runs both.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/internal/imagetest"
	"warren/meta"
)

const (
	tenant = "bench"
	repo   = "bench/img"
)

func main() {
	serve := flag.Bool("registry", false, "serve a registry on a loopback port, its address written to -addr-file, until a signal or this program's parent goes")
	addrFile := flag.String("addr-file", "", "with -registry: where its host:port is written")
	reg := flag.String("registry-addr", "", "the registry's host:port (a -registry of this program)")
	socket := flag.String("socket", "/var/lib/warren/warren.sock", "the daemon's socket")
	data := flag.String("data", "", "the daemon's data folder (its image store is DATA/images)")
	warren := flag.String("warren", "bin/warren", "the warren CLI")
	work := flag.String("work", "", "a folder for skopeo's layouts and umoci's bundles")
	runs := flag.Int("runs", 5, "timed pulls of each side (the median is shown)")
	mib := flag.Int("mib", 100, "about how many MiB the image unpacks to")
	firsts := flag.Int("firsts", 20, "new threads of each root for the first-command measure")
	execs := flag.Int("execs", 200, "warm commands of each root")
	many := flag.Int("many", 100, "threads bound on the image for the disk measure")
	nativeOff := flag.String("native-unavailable", "", "skopeo and umoci are not measured, for this `reason`")
	rootless := flag.Bool("rootless", false, "run umoci unpack --rootless (not root)")
	flag.Parse()
	if *serve {
		if err := serveRegistry(*addrFile); err != nil {
			log.Fatalf("imagebench -registry: %v", err)
		}
		return
	}
	if *reg == "" || *data == "" || *work == "" {
		log.Fatal("imagebench: -registry-addr, -data and -work are needed (bench/image.sh gives them)")
	}
	b := &bench{
		c: client.New(*socket), socket: *socket, data: *data, warren: *warren, work: *work, reg: *reg,
		runs: *runs, nativeOff: *nativeOff, rootless: *rootless,
	}
	defer b.c.CloseIdleConnections()
	if err := b.run(int64(*mib)<<20, *firsts, *execs, *many); err != nil {
		log.Fatalf("imagebench: %v", err)
	}
}

// serveRegistry serves an in-memory registry on 127.0.0.1 and writes its
// address to addrFile once it listens. It ends on SIGINT or SIGTERM, and
// when its parent (the script) goes.
func serveRegistry(addrFile string) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl: %w", err)
	}
	if os.Getppid() == 1 {
		return errors.New("the parent is gone")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; srv.Close() }()
	// Written whole, then renamed: the script reads it once it exists.
	if err := os.WriteFile(addrFile+".tmp", []byte(l.Addr().String()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		return err
	}
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type bench struct {
	c                     *client.Client
	socket, data, warren  string
	work, reg             string
	runs                  int
	nativeOff             string
	rootless              bool
	samples               strings.Builder
	layerInfo             []string
	unpackedB, compressed int64
}

// part is a part of the host's files made into one layer.
type part struct {
	root  string  // a host folder; the layer holds it at the same path
	share float64 // of the image's bytes
}

// The host folders the image is made of. A folder the host lacks is left
// out, and the report says what the layers hold.
var parts = []part{
	{"/usr/lib/x86_64-linux-gnu", 0.45},
	{"/usr/lib/python3.*", 0.30},
	{"/usr/share", 0.25},
}

// hostLayer makes a layer of the first files of root (lexical order) up
// to budget bytes, each file at most budget/4, with its folders and
// links, and the folders above root.
func hostLayer(root string, budget int64) (v1.Layer, string, int64, error) {
	var files []imagetest.File
	rel := strings.TrimPrefix(root, "/")
	for p := filepath.Dir(rel); p != "."; p = filepath.Dir(p) {
		files = append([]imagetest.File{{Path: p, Dir: true}}, files...)
	}
	var used int64
	var nfiles, ndirs, nlinks int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: left out
		}
		inner := strings.TrimPrefix(p, "/")
		switch {
		case d.IsDir():
			files = append(files, imagetest.File{Path: inner, Dir: true})
			ndirs++
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return nil
			}
			files = append(files, imagetest.File{Path: inner, Link: t})
			nlinks++
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil || info.Size() > budget/4 {
				return nil
			}
			if used+info.Size() > budget {
				return fs.SkipAll
			}
			body, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			files = append(files, imagetest.File{Path: inner, Body: string(body), Mode: int64(info.Mode().Perm())})
			used += int64(len(body))
			nfiles++
		}
		return nil
	})
	if err != nil {
		return nil, "", 0, fmt.Errorf("reading %s: %w", root, err)
	}
	l, err := imagetest.MakeLayer(files...)
	if err != nil {
		return nil, "", 0, err
	}
	return l, fmt.Sprintf("%s: %d files (%.1f MiB), %d folders, %d links", root, nfiles, float64(used)/(1<<20), ndirs, nlinks), used, nil
}

// buildImage makes the image's layers and pushes n images of them, tags
// 0 to n-1 (each a config of its own), and the tag "threads".
func (b *bench) buildImage(size int64, n int) error {
	base, err := imagetest.MakeBusybox("imagebench")
	if err != nil {
		return err
	}
	ls, err := base.Layers()
	if err != nil {
		return err
	}
	layers := slices.Clone(ls)
	bb, _ := os.Stat(imagetest.BusyboxPath)
	b.layerInfo = append(b.layerInfo, fmt.Sprintf("busybox-static: /bin/busybox (%.1f MiB) and its applets' links", float64(bb.Size())/(1<<20)))
	b.unpackedB += bb.Size()
	for _, p := range parts {
		roots, _ := filepath.Glob(p.root)
		if len(roots) == 0 {
			b.layerInfo = append(b.layerInfo, p.root+": not on this host, left out")
			continue
		}
		l, info, used, err := hostLayer(roots[len(roots)-1], int64(float64(size)*p.share))
		if err != nil {
			return err
		}
		layers = append(layers, l)
		b.layerInfo = append(b.layerInfo, info)
		b.unpackedB += used
	}
	for _, l := range layers {
		s, err := l.Size()
		if err != nil {
			return err
		}
		b.compressed += s
	}
	cf, err := base.ConfigFile()
	if err != nil {
		return err
	}
	tags := []string{"threads"}
	for i := range n {
		tags = append(tags, strconv.Itoa(i))
	}
	for _, tag := range tags {
		img, err := imagetest.MakeImage(append(slices.Clone(cf.Config.Env), "BENCH_IMAGE="+tag), "", layers...)
		if err != nil {
			return err
		}
		ref, err := name.NewTag(b.ref(tag), name.Insecure)
		if err != nil {
			return err
		}
		// The layers go up once; later pushes find them there.
		if err := remote.Write(ref, img); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return nil
}

func (b *bench) ref(tag string) string { return b.reg + "/" + repo + ":" + tag }

// command runs name with args, its output kept for an error.
func command(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// It goes with the benchmark, stopped by the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// native is skopeo's copy and umoci's unpack of tag: each one's time,
// and the time of a sync after.
func (b *bench) native(tag string) (skopeo, umoci, sync time.Duration, err error) {
	layout := filepath.Join(b.work, "oci-"+tag)
	bundle := filepath.Join(b.work, "bundle-"+tag)
	start := time.Now()
	if err := command("skopeo", "copy", "--quiet", "--src-tls-verify=false", "docker://"+b.ref(tag), "oci:"+layout+":"+tag); err != nil {
		return 0, 0, 0, err
	}
	t1 := time.Now()
	args := []string{"unpack"}
	if b.rootless {
		args = append(args, "--rootless")
	}
	if err := command("umoci", append(args, "--image", layout+":"+tag, bundle)...); err != nil {
		return 0, 0, 0, err
	}
	t2 := time.Now()
	unix.Sync()
	return t1.Sub(start), t2.Sub(t1), time.Since(t2), nil
}

// pull is `warren image pull` of tag, timed from the CLI's start to its
// exit.
func (b *bench) pull(tag string) (time.Duration, error) {
	start := time.Now()
	if err := command(b.warren, "image", "pull", "--socket", b.socket, b.ref(tag)); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (b *bench) run(size int64, firsts, execs, many int) error {
	ctx := context.Background()
	say("building the image and pushing it to %s", b.reg)
	if err := b.buildImage(size, b.runs+1); err != nil {
		return fmt.Errorf("the image: %w", err)
	}
	fmt.Printf("image %s: %d layers, %.1f MiB of files, %.1f MiB compressed (gzip), on a loopback registry of the bench's (in memory):\n", repo, len(b.layerInfo), float64(b.unpackedB)/(1<<20), float64(b.compressed)/(1<<20))
	for _, s := range b.layerInfo {
		fmt.Printf("  %s\n", s)
	}
	if err := b.pulls(); err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	// Part 1's images go; the threads' image is the only one after.
	for i := range b.runs + 1 {
		if err := b.c.Images().Remove(ctx, b.ref(strconv.Itoa(i))); err != nil {
			return fmt.Errorf("remove %s: %w", b.ref(strconv.Itoa(i)), err)
		}
	}
	say("pulling the threads' image")
	if _, err := b.pull("threads"); err != nil {
		return err
	}
	unix.Sync()
	if err := b.threads(ctx, firsts, execs); err != nil {
		return err
	}
	if err := b.disk(ctx, many); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	fmt.Printf("\nsamples\n%s", b.samples.String())
	return nil
}

// pulls measures part 1: run 0 of each side untimed (the registry's
// answers, the programs and the daemon warm), then -runs each, the first
// side alternating. A sync before each, so that none pays for the last
// one's write-back.
func (b *bench) pulls() error {
	var sk, um, sy, wa []time.Duration
	for i := range b.runs + 1 {
		tag := strconv.Itoa(i)
		for k := range 2 {
			if (k+i)%2 == 0 {
				if b.nativeOff != "" {
					continue
				}
				unix.Sync()
				say("skopeo copy and umoci unpack of %s", b.ref(tag))
				s, u, y, err := b.native(tag)
				if err != nil {
					return err
				}
				if i > 0 {
					sk, um, sy = append(sk, s), append(um, u), append(sy, y)
				}
			} else {
				unix.Sync()
				say("warren image pull %s", b.ref(tag))
				d, err := b.pull(tag)
				if err != nil {
					return err
				}
				if i > 0 {
					wa = append(wa, d)
				}
			}
		}
	}
	// What each side unpacked, to tell that they made the same tree.
	img, err := b.c.Images().List(context.Background())
	if err != nil {
		return err
	}
	var wbytes int64
	for _, im := range img.Images {
		if im.Ref == b.ref("1") || strings.HasSuffix(im.Ref, "/"+repo+":1") {
			wbytes = im.Bytes
		}
	}
	fmt.Printf("\npull and unpack, median of %d runs, a sync before each:\n", b.runs)
	fmt.Printf("  skopeo copy --src-tls-verify=false docker://%s oci:DIR:TAG; umoci unpack --image DIR:TAG BUNDLE\n", b.ref("TAG"))
	fmt.Printf("  warren image pull %s (a tag of its own each run, the same layers)\n", b.ref("TAG"))
	fmt.Printf("%-40s %14s %12s %8s\n", "", "skopeo+umoci", "warren", "ratio")
	w := median(wa)
	if b.nativeOff != "" {
		fmt.Printf("%-40s %14s %12s\n", "pull + unpack", "unavailable", round(w))
		fmt.Printf("  (skopeo and umoci unavailable: %s)\n", b.nativeOff)
	} else {
		tot := make([]time.Duration, len(sk))
		totSync := make([]time.Duration, len(sk))
		for i := range sk {
			tot[i] = sk[i] + um[i]
			totSync[i] = tot[i] + sy[i]
		}
		n := median(tot)
		fmt.Printf("%-40s %14s %12s %7.2fx\n", "pull + unpack", round(n), round(w), float64(w)/float64(n))
		fmt.Printf("%-40s %14s %12s %7.2fx\n", "  the same, then sync (warren syncs)", round(median(totSync)), round(w), float64(w)/float64(median(totSync)))
		fmt.Printf("%-40s %14s\n", "  of which skopeo copy", round(median(sk)))
		fmt.Printf("%-40s %14s\n", "  of which umoci unpack", round(median(um)))
		rootfs := filepath.Join(b.work, "bundle-1", "rootfs")
		nb, err := duBytes(rootfs)
		if err != nil {
			return err
		}
		fmt.Printf("%-40s %14s %12s\n", "unpacked tree (du -sb; warren: Bytes)", mibs(nb), mibs(wbytes))
		fmt.Printf("pull, warren over skopeo+umoci: %.2fx (target < 1, warren faster): %s\n", float64(w)/float64(n), verdict(w < n))
		b.sample("skopeo copy", sk)
		b.sample("umoci unpack", um)
		b.sample("sync after umoci", sy)
	}
	b.sample("warren image pull", wa)
	return nil
}

// threads measures part 2: new threads' first command and warm commands,
// on the image and on the host's folders.
func (b *bench) threads(ctx context.Context, firsts, execs int) error {
	roots := [2]meta.Settings{{}, {Image: b.ref("threads")}}
	names := [2]string{"host", "image"}
	exec1 := func(thread string) error {
		code, err := b.c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "true"}, nil, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d", code)
		}
		if err != nil {
			return fmt.Errorf("true in %s: %w", thread, err)
		}
		return nil
	}
	var first [2][]time.Duration
	// Round 0 untimed: the first jail on each root.
	for i := range firsts + 1 {
		for k := range 2 {
			k := (k + i) % 2
			thread := fmt.Sprintf("first-%s-%d", names[k], i)
			start := time.Now()
			if _, err := b.c.BindWith(ctx, tenant, thread, roots[k]); err != nil {
				return fmt.Errorf("bind %s: %w", thread, err)
			}
			if err := exec1(thread); err != nil {
				return err
			}
			if i > 0 {
				first[k] = append(first[k], time.Since(start))
			}
			if err := b.c.DeleteThread(ctx, tenant, thread); err != nil {
				return fmt.Errorf("delete %s: %w", thread, err)
			}
		}
	}
	var warm [2][]time.Duration
	for k := range 2 {
		thread := "warm-" + names[k]
		if _, err := b.c.BindWith(ctx, tenant, thread, roots[k]); err != nil {
			return fmt.Errorf("bind %s: %w", thread, err)
		}
		if err := exec1(thread); err != nil {
			return err
		}
	}
	for i := range execs {
		for k := range 2 {
			k := (k + i) % 2
			start := time.Now()
			if err := exec1("warm-" + names[k]); err != nil {
				return err
			}
			warm[k] = append(warm[k], time.Since(start))
		}
	}
	for k := range 2 {
		if err := b.c.DeleteThread(ctx, tenant, "warm-"+names[k]); err != nil {
			return err
		}
	}
	fh, fi := median(first[0]), median(first[1])
	wh, wi := median(warm[0]), median(warm[1])
	fmt.Printf("\nthreads, median (through the API: bind, exec)\n")
	fmt.Printf("%-40s %14s %12s %8s\n", "", "host folders", "image", "ratio")
	fmt.Printf("%-40s %14s %12s %7.2fx\n", fmt.Sprintf("new thread: bind + first true (%d each)", firsts), round(fh), round(fi), float64(fi)/float64(fh))
	fmt.Printf("%-40s %14s %12s %7.2fx\n", fmt.Sprintf("warm true (%d each)", execs), round(wh), round(wi), float64(wi)/float64(wh))
	fmt.Printf("first command, image over host: %.2fx (target <= 1.2x): %s\n", float64(fi)/float64(fh), verdict(float64(fi) <= 1.2*float64(fh)))
	fmt.Printf("warm command, image over host:  %.2fx (target: unchanged, within 1.1x): %s\n", float64(wi)/float64(wh), verdict(float64(wi) <= 1.1*float64(wh)))
	b.sample("first true, host folders", first[0])
	b.sample("first true, image", first[1])
	return nil
}

// disk measures part 3: many threads bound on the image, a command run
// in each, and the store on disk.
func (b *bench) disk(ctx context.Context, many int) error {
	before, err := duBytesX(b.data)
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range many {
		thread := fmt.Sprintf("many-%d", i)
		if _, err := b.c.BindWith(ctx, tenant, thread, meta.Settings{Image: b.ref("threads")}); err != nil {
			return fmt.Errorf("bind %s: %w", thread, err)
		}
		code, err := b.c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "test -f /marker && test -d /usr/share"}, nil, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: the image's files are not the jail's root", code)
		}
		if err != nil {
			return fmt.Errorf("a command in %s: %w", thread, err)
		}
	}
	took := time.Since(start)
	after, err := duBytesX(b.data)
	if err != nil {
		return err
	}
	store, err := duBytes(filepath.Join(b.data, "images"))
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(b.data, "images", "roots"))
	if err != nil {
		return err
	}
	trees := 0
	for _, e := range entries {
		if e.IsDir() {
			trees++
		}
	}
	ls, err := b.c.Images().List(ctx)
	if err != nil {
		return err
	}
	var img api.Image
	for _, im := range ls.Images {
		if im.Ref == b.ref("threads") {
			img = im
		}
	}
	fmt.Printf("\n%d threads bound on one image, a command in each (%s): its files checked from the jail\n", many, round(took))
	fmt.Printf("%-44s %12s\n", "image store on disk (du -sb DATA/images)", mibs(store))
	fmt.Printf("%-44s %12s\n", "warren image ls: the store's bytes", mibs(ls.StoreBytes))
	fmt.Printf("%-44s %12s  (%d threads pinned to it)\n", "warren image ls: the image's bytes", mibs(img.Bytes), len(img.Threads))
	fmt.Printf("%-44s %12d  (warren image ls lists %d)\n", "image trees on disk (DATA/images/roots)", trees, len(ls.Images))
	fmt.Printf("%-44s %12s\n", fmt.Sprintf("the data folder grew by (du -sbx DATA)"), mibs(after-before))
	copies := int64(many) * img.Bytes
	fmt.Printf("%-44s %12s  (on disk: %.3fx of it)\n", fmt.Sprintf("a copy per thread: %d x the image", many), mibs(copies), float64(store)/float64(copies))
	fmt.Printf("one copy on disk for %d threads: %s\n", many, verdict(trees == 1 && store < 2*img.Bytes))
	return nil
}

func duBytes(path string) (int64, error) { return du("-sb", path) }

// duBytesX does not cross into other filesystems: the threads' FUSE
// mounts are under the data folder.
func duBytesX(path string) (int64, error) { return du("-sbx", path) }

func du(flag, path string) (int64, error) {
	out, err := exec.Command("du", flag, path).Output()
	if err != nil {
		return 0, fmt.Errorf("du %s %s: %w", flag, path, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("du %s %s: no answer", flag, path)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

func (b *bench) sample(label string, d []time.Duration) {
	fmt.Fprintf(&b.samples, "%s:", label)
	for _, x := range d {
		fmt.Fprintf(&b.samples, " %s", round(x))
	}
	b.samples.WriteString("\n")
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func mibs(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func median(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}
