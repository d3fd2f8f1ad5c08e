// Command fsbench measures filesystem work side by side on up to four
// roots — native ext4, go-fuse's stock loopback, a warren mount and a
// warren mount with its edit checks off — and prints the median of each
// workload with its ratio to native, and warren's cost of the edit checks:
// its median with the checks on over its median with them off.
//
// Usage:
//
//	fsbench -tar gosrc.tar -native DIR [-loopback DIR] [-warren DIR] [-warren-off DIR] [flags]
//
// Every root must be an empty folder on the filesystem it stands for.
// -warren-off is a mount of a daemon started with `warren serve
// --no-edit-checks`: the same filesystem without per-path locks, versions,
// read records or the refusal of stale writes.
// Each workload runs -runs times per root; the roots take turns within a
// repetition, so drift over time (page cache, disk state) hits every root
// alike. A root that is not available is named with -loopback-unavailable,
// -warren-unavailable or -warren-off-unavailable and shows as such in the
// report. A workload that fails on one root is reported as failed there;
// the others go on.
//
// bench/fs.sh sets up the mounts and runs this; see bench/README.md for what
// is measured and how to read the ratios.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"
)

// Targets from DESIGN.md: metadata-heavy work at most 1.5× native time,
// sequential I/O at least 0.9× native throughput. The edit checks may cost
// warren at most 1.1× its own time without them, on every workload.
const (
	metadataTarget   = 1.5
	sequentialTarget = 0.9
	editChecksTarget = 1.1
	fsMetricsTarget  = 1.05
	// uringGoal is the io_uring transport's goal on the round trip: classic
	// time over uring time.
	uringGoal = 2.0
)

// The roots, in the order they take turns and appear in the report.
const (
	nativeName    = "native"
	loopbackName  = "loopback"
	warrenName    = "warren"
	warrenOffName = "warren (checks off)"
	// warrenNoMetricsName is warren serve --no-fs-metrics: the FUSE
	// requests untimed.
	warrenNoMetricsName = "warren (no fs metrics)"
	// warrenURingName is warren serve --fuse-transport uring: the same
	// daemon as warren (a reader of its events too), its mounts served
	// over FUSE over io_uring.
	warrenURingName = "warren (uring)"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("fsbench: ")

	var cfg config
	flag.StringVar(&cfg.tarball, "tar", "", "tarball of the source tree to untar (required)")
	flag.StringVar(&cfg.native, "native", "", "empty folder on native ext4 (required)")
	flag.StringVar(&cfg.loopback, "loopback", "", "empty folder on go-fuse's stock loopback mount")
	flag.StringVar(&cfg.warren, "warren", "", "empty folder on a warren mount")
	flag.StringVar(&cfg.warrenOff, "warren-off", "", "empty folder on a mount of warren serve --no-edit-checks")
	flag.StringVar(&cfg.loopbackWhy, "loopback-unavailable", "", "why the loopback root is missing, for the report")
	flag.StringVar(&cfg.warrenWhy, "warren-unavailable", "", "why the warren root is missing, for the report")
	flag.StringVar(&cfg.warrenOffWhy, "warren-off-unavailable", "", "why the warren root with checks off is missing, for the report")
	flag.StringVar(&cfg.warrenNoMetrics, "warren-nometrics", "", "empty folder on a mount of warren serve --no-fs-metrics")
	flag.StringVar(&cfg.warrenNoMetricsWhy, "warren-nometrics-unavailable", "", "why the warren root without fs metrics is missing, for the report")
	flag.StringVar(&cfg.warrenURing, "warren-uring", "", "empty folder on a mount of warren serve --fuse-transport uring")
	flag.StringVar(&cfg.warrenURingWhy, "warren-uring-unavailable", "", "why the warren root over io_uring is missing, for the report")
	flag.IntVar(&cfg.opens, "opens", 20000, "open+close pairs of the round-trip workload")
	flag.IntVar(&cfg.runs, "runs", 5, "timed repetitions of each workload per root")
	flag.Int64Var(&cfg.seqMiB, "seq-mib", 1024, "size of the sequential write/read file in MiB")
	flag.StringVar(&cfg.grep, "grep", "ENOTCONN", "fixed string that grep -r looks for")
	flag.StringVar(&cfg.only, "only", "", "comma-separated workloads to run (default all: "+strings.Join(workloadNames(), ",")+")")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "longest one timed step may take before its root is given up")
	flag.StringVar(&cfg.out, "out", "", "also write the report to this file")
	flag.Parse()

	if err := run(cfg); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	tarball, native, loopback, warren, warrenOff string
	loopbackWhy, warrenWhy, warrenOffWhy         string
	warrenNoMetrics, warrenNoMetricsWhy          string
	warrenURing, warrenURingWhy                  string
	opens                                        int
	runs                                         int
	seqMiB                                       int64
	grep, only, out                              string
	timeout                                      time.Duration
}

func run(cfg config) error {
	if cfg.tarball == "" || cfg.native == "" {
		return fmt.Errorf("-tar and -native are required")
	}
	if cfg.runs < 1 || cfg.seqMiB < 1 {
		return fmt.Errorf("-runs and -seq-mib must be at least 1")
	}
	works, err := selectWorkloads(cfg.only)
	if err != nil {
		return err
	}
	tree, err := readTarIndex(cfg.tarball)
	if err != nil {
		return err
	}

	systems := []*system{
		newSystem(nativeName, cfg.native, ""),
		newSystem(loopbackName, cfg.loopback, cfg.loopbackWhy),
		newSystem(warrenName, cfg.warren, cfg.warrenWhy),
		newSystem(warrenOffName, cfg.warrenOff, cfg.warrenOffWhy),
		newSystem(warrenNoMetricsName, cfg.warrenNoMetrics, cfg.warrenNoMetricsWhy),
		newSystem(warrenURingName, cfg.warrenURing, cfg.warrenURingWhy),
	}
	for _, s := range systems {
		if s.root != "" {
			if err := s.check(); err != nil {
				return err
			}
		}
	}

	b := &bench{cfg: cfg, tree: tree, systems: systems, started: time.Now()}
	for _, w := range works {
		b.measure(w)
	}

	var out io.Writer = os.Stdout
	var file *os.File
	if cfg.out != "" {
		if file, err = os.Create(cfg.out); err != nil {
			return fmt.Errorf("create report: %w", err)
		}
		out = io.MultiWriter(os.Stdout, file)
	}
	b.report(out, works)
	if file != nil {
		if err := file.Close(); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		log.Printf("report written to %s", cfg.out)
	}
	return nil
}
