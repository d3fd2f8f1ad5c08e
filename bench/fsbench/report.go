package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// median returns the middle sample (the mean of the two middle ones for an
// even count), or 0 when there are none.
func median(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// complete reports whether r holds every run of a workload that did not fail.
func (b *bench) complete(r *result) bool {
	return r != nil && r.err == nil && len(r.samples) == b.cfg.runs
}

// ratio compares s to native on w: time over native time for metadata
// work, throughput over native throughput for sequential I/O. ok is false
// if either side is missing.
func (b *bench) ratio(w workload, s *system) (ratio float64, ok bool) {
	native, other := b.systems[0].results[w.name], s.results[w.name]
	if !b.complete(native) || !b.complete(other) {
		return 0, false
	}
	n, o := median(native.samples).Seconds(), median(other.samples).Seconds()
	if w.kind == sequential {
		return n / o, true
	}
	return o / n, true
}

// cell shows s's median on w, or why there is none.
func (b *bench) cell(w workload, s *system) string {
	if s.root == "" {
		return "n/a"
	}
	r := s.results[w.name]
	switch {
	case r == nil:
		return "-"
	case r.err != nil:
		return "failed"
	case len(r.samples) == 0:
		return "-"
	}
	return w.format(b, median(r.samples))
}

// system returns the system with the given name.
func (b *bench) system(name string) *system {
	for _, s := range b.systems {
		if s.name == name {
			return s
		}
	}
	panic("fsbench: no system " + name)
}

// onOff is what the one thing the warren root offName has off costs
// warren on w: the median, over the repetitions, of warren's time over
// offName's time in the same repetition (sequential rows: throughput off /
// throughput on, the same quotient). ok is false if either side is
// missing.
//
// Paired, not the quotient of the two medians: within a repetition the
// two daemons run one after the other, so what the machine was doing at
// the time (another tenant of the host, the disk's write-back) falls on
// both, while the medians of a few runs each can come from different
// moments. The report lists both.
func (b *bench) onOff(w workload, offName string) (ratio float64, ok bool) {
	on, off := b.system(warrenName).results[w.name], b.system(offName).results[w.name]
	if !b.complete(on) || !b.complete(off) {
		return 0, false
	}
	return pairedRatio(on.samples, off.samples), true
}

// mediansRatio is warren's median time on w over offName's.
func (b *bench) mediansRatio(w workload, offName string) (ratio float64, ok bool) {
	on, off := b.system(warrenName).results[w.name], b.system(offName).results[w.name]
	if !b.complete(on) || !b.complete(off) {
		return 0, false
	}
	return median(on.samples).Seconds() / median(off.samples).Seconds(), true
}

// pairedRatio is the median of on[i]/off[i]; the two have one sample per
// repetition, in order.
func pairedRatio(on, off []time.Duration) float64 {
	n := min(len(on), len(off))
	if n == 0 {
		return 0
	}
	r := make([]float64, 0, n)
	for i := range n {
		r = append(r, on[i].Seconds()/off[i].Seconds())
	}
	slices.Sort(r)
	if n%2 == 1 {
		return r[n/2]
	}
	return (r[n/2-1] + r[n/2]) / 2
}

// onOffTable prints warren against the root offName per workload: both
// medians, the paired on/off quotient held against target, and the
// quotient of the medians.
func (b *bench) onOffTable(out io.Writer, works []workload, offName, onHeader, offHeader string, target float64) {
	on, off := b.system(warrenName), b.system(offName)
	rows := [][]string{{"workload", onHeader, offHeader, "on/off", "target", "medians"}}
	for _, w := range works {
		row := []string{w.label(b), b.cell(w, on), b.cell(w, off), "-", "-", "-"}
		if r, ok := b.onOff(w, offName); ok {
			row[3] = fmt.Sprintf("%.2fx", r)
			row[4] = "MISSED"
			if r <= target {
				row[4] = "MET"
			}
		}
		if r, ok := b.mediansRatio(w, offName); ok {
			row[5] = fmt.Sprintf("%.2fx", r)
		}
		rows = append(rows, row)
	}
	table(out, nil, rows)
}

// header is the column header of a system in the tables.
func header(s *system) string {
	switch s.name {
	case warrenOffName:
		return "checks off"
	case warrenNoMetricsName:
		return "no fs metrics"
	case warrenURingName:
		return "uring"
	}
	return s.name
}

// span labels the columns first..last of a table on a line above its
// header row.
type span struct {
	label       string
	first, last int
}

// table prints rows as aligned columns, the first left-aligned and the
// others right-aligned, with a rule under the first (header) row and the
// spans, if any, on a line above it.
func table(out io.Writer, spans []span, rows [][]string) {
	const gap = "   "
	var widths []int
	for _, row := range rows {
		for i, c := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(c))
		}
	}
	// start[i] is where column i begins.
	start := make([]int, len(widths))
	total := 0
	for i, w := range widths {
		if i > 0 {
			total += len(gap)
		}
		start[i] = total
		total += w
	}
	if len(spans) > 0 {
		line := []byte(strings.Repeat(" ", total))
		for _, sp := range spans {
			from, to := start[sp.first], start[sp.last]+widths[sp.last]
			label := " " + sp.label + " "
			if pad := to - from - len(label); pad >= 0 {
				label = strings.Repeat("-", pad/2) + label + strings.Repeat("-", pad-pad/2)
			}
			copy(line[from:], label)
		}
		fmt.Fprintf(out, "%s\n", strings.TrimRight(string(line), " "))
	}
	for i, row := range rows {
		var line strings.Builder
		for j, c := range row {
			if j == 0 {
				fmt.Fprintf(&line, "%-*s", widths[j], c)
			} else {
				fmt.Fprintf(&line, "%s%*s", gap, widths[j], c)
			}
		}
		fmt.Fprintf(out, "%s\n", line.String())
		if i == 0 {
			fmt.Fprintf(out, "%s\n", strings.Repeat("-", line.Len()))
		}
	}
}

func (b *bench) report(out io.Writer, works []workload) {
	p := func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	native := b.systems[0]
	on := b.system(warrenName)

	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	release := utsString(uts.Release[:])
	p("warren filesystem benchmark, %s\n", b.started.UTC().Format("2006-01-02 15:04:05 UTC"))
	p("host: %d CPUs, Linux %s, %s; %d runs per workload, median shown, roots take turns\n",
		runtime.NumCPU(), release, runtime.Version(), b.cfg.runs)
	p("tree: %s/, %d entries (%d files, %.0f MiB)\n", b.tree.top, b.tree.entries, b.tree.files, float64(b.tree.bytes)/(1<<20))
	for _, s := range b.systems {
		if s.root == "" {
			p("  %-*s unavailable (%s)\n", nameWidth+1, s.name+":", s.unavailable)
			continue
		}
		p("  %-*s %s (%s)\n", nameWidth+1, s.name+":", s.root, s.fsType)
	}
	p("\n")

	// The table: every system's median, then each FUSE system's ratio to
	// native.
	head := []string{"workload"}
	for _, s := range b.systems {
		head = append(head, header(s))
	}
	for _, s := range b.systems[1:] {
		head = append(head, header(s))
	}
	rows := [][]string{head}
	for _, w := range works {
		row := []string{w.label(b)}
		for _, s := range b.systems {
			row = append(row, b.cell(w, s))
		}
		for _, s := range b.systems[1:] {
			if r, ok := b.ratio(w, s); ok {
				row = append(row, fmt.Sprintf("%.2fx", r))
			} else {
				row = append(row, "-")
			}
		}
		rows = append(rows, row)
	}
	n := len(b.systems)
	table(out, []span{{"median", 1, n}, {"ratio to native", n + 1, 2*n - 1}}, rows)
	p("\nratios to native: metadata rows are time / native time (lower is better, target <= %.2fx);\n", metadataTarget)
	p("                  sequential rows are throughput / native throughput (higher is better, target >= %.2fx).\n", sequentialTarget)
	p("checks off: warren serve --no-edit-checks, the same filesystem without its edit checks.\n\n")

	// What the edit checks cost: warren against itself without them.
	p("edit checks: warren with the checks on / off (target <= %.2fx)\n", editChecksTarget)
	b.onOffTable(out, works, warrenOffName, "checks on", "checks off", editChecksTarget)
	p("\non/off is time with the checks over time without them on every row (sequential rows: throughput\n")
	p("off / throughput on): 1.00x means the checks cost nothing, 1.10x that they add 10%%. It is the median of\n")
	p("the repetitions' own quotients (the two daemons ran one after the other in each); medians is the\n")
	p("quotient of the two medians, for comparison. The target is held against on/off.\n\n")

	// What timing the FUSE requests and building file events cost:
	// warren against itself with --no-fs-metrics and no reader.
	p("fs metrics and file events: warren with its FUSE requests timed and a reader of its file events /\n")
	p("warren serve --no-fs-metrics with no reader (target <= %.2fx; on/off and medians as above)\n", fsMetricsTarget)
	b.onOffTable(out, works, warrenNoMetricsName, "metrics on", "metrics off", fsMetricsTarget)
	p("\n")

	// What the io_uring transport gains: warren against itself served
	// over io_uring.
	ur := b.system(warrenURingName)
	p("FUSE transport: warren served over /dev/fuse (classic) / over io_uring (uring); above 1.00x the\n")
	p("rings are faster (goal >= %.2fx on the open+close round trip: half the time)\n", uringGoal)
	rows = [][]string{{"workload", "classic", "uring", "classic/uring"}}
	for _, w := range works {
		row := []string{w.label(b), b.cell(w, on), b.cell(w, ur), "-"}
		if r, ok := b.onOff(w, warrenURingName); ok {
			if w.kind == sequential {
				r = 1 / r
			}
			row[3] = fmt.Sprintf("%.2fx", r)
		}
		rows = append(rows, row)
	}
	table(out, nil, rows)
	p("\n")

	// The verdict against the targets.
	for _, s := range b.systems[1:] {
		p("verdict %-*s %s\n", nameWidth+1, s.name+":", b.verdict(works, s))
	}
	p("verdict %-*s %s\n", nameWidth+1, "checks on/off:", b.onOffVerdict(works, warrenOffName, editChecksTarget))
	p("verdict %-*s %s\n", nameWidth+1, "metrics+events on/off:", b.onOffVerdict(works, warrenNoMetricsName, fsMetricsTarget))

	// Correctness remarks and failures.
	var notes []string
	for _, w := range works {
		nr := native.results[w.name]
		for _, s := range b.systems {
			r := s.results[w.name]
			if r == nil {
				continue
			}
			if r.err != nil {
				notes = append(notes, fmt.Sprintf("%s %s failed: %v", s.name, w.name, r.err))
			}
			for _, n := range r.notes {
				notes = append(notes, fmt.Sprintf("%s %s: %s", s.name, w.name, n))
			}
			if w.name == "grep" && s != native && b.complete(r) && b.complete(nr) && r.hits != nr.hits {
				notes = append(notes, fmt.Sprintf("%s grep: %d files matched, native %d", s.name, r.hits, nr.hits))
			}
		}
	}
	for _, s := range b.systems {
		if s.broken != "" {
			notes = append(notes, fmt.Sprintf("%s given up: %s", s.name, s.broken))
		}
	}
	if b.cacheNote != "" {
		notes = append(notes, b.cacheNote)
	}
	if native.fsType != "ext4" {
		notes = append(notes, fmt.Sprintf("native root is %s, not ext4", native.fsType))
	}
	for _, s := range b.systems[1:] {
		if s.root != "" && s.fsType != "fuse" {
			notes = append(notes, fmt.Sprintf("%s root is %s, not a FUSE mount", s.name, s.fsType))
		}
	}
	if len(notes) > 0 {
		p("\nnotes:\n")
		for _, n := range notes {
			p("  %s\n", n)
		}
	}

	// Every sample, for whoever doubts a median.
	p("\nsamples:\n")
	for _, w := range works {
		for _, s := range b.systems {
			r := s.results[w.name]
			if r == nil || len(r.samples) == 0 {
				continue
			}
			var f []string
			for _, d := range r.samples {
				f = append(f, w.format(b, d))
			}
			p("  %-10s %-*s %s\n", w.name, nameWidth, s.name, strings.Join(f, ", "))
		}
	}
}

// verdict judges s against the targets: the worst metadata ratio and the
// worst sequential ratio, each with the workload that set it.
func (b *bench) verdict(works []workload, s *system) string {
	if s.root == "" {
		return "not measured: unavailable (" + s.unavailable + ")"
	}
	var parts []string
	for _, k := range []kind{metadata, sequential} {
		worst, worstName, missing, seen := 0.0, "", 0, false
		for _, w := range works {
			if w.kind != k {
				continue
			}
			seen = true
			r, ok := b.ratio(w, s)
			if !ok {
				missing++
				continue
			}
			if worstName == "" || (k == metadata && r > worst) || (k == sequential && r < worst) {
				worst, worstName = r, w.name
			}
		}
		if !seen {
			continue
		}
		name := map[kind]string{metadata: "metadata", sequential: "sequential"}[k]
		if worstName == "" {
			parts = append(parts, name+" not measured")
			continue
		}
		var met bool
		var target string
		if k == metadata {
			met, target = worst <= metadataTarget, fmt.Sprintf("<= %.2fx", metadataTarget)
		} else {
			met, target = worst >= sequentialTarget, fmt.Sprintf(">= %.2fx", sequentialTarget)
		}
		mark := verdictMark(met, missing)
		parts = append(parts, fmt.Sprintf("%s worst %.2fx (%s), target %s: %s", name, worst, worstName, target, mark))
	}
	return strings.Join(parts, "; ")
}

// verdictMark says whether a target was met, and whether some workloads
// went unmeasured.
func verdictMark(met bool, missing int) string {
	switch {
	case met && missing > 0:
		return fmt.Sprintf("INCOMPLETE (%d not measured)", missing)
	case met:
		return "MET"
	case missing > 0:
		return fmt.Sprintf("MISSED (and %d not measured)", missing)
	}
	return "MISSED"
}

// onOffVerdict judges warren against the warren root offName (one thing
// off) with target: the worst on/off ratio over the workloads, and the
// workload that set it.
func (b *bench) onOffVerdict(works []workload, offName string, target float64) string {
	for _, s := range []*system{b.system(warrenName), b.system(offName)} {
		if s.root == "" {
			return fmt.Sprintf("not measured: %s unavailable (%s)", s.name, s.unavailable)
		}
	}
	worst, worstName, missing := 0.0, "", 0
	for _, w := range works {
		r, ok := b.onOff(w, offName)
		if !ok {
			missing++
			continue
		}
		if worstName == "" || r > worst {
			worst, worstName = r, w.name
		}
	}
	if worstName == "" {
		return "not measured"
	}
	mark := verdictMark(worst <= target, missing)
	return fmt.Sprintf("worst %.2fx (%s), target <= %.2fx: %s", worst, worstName, target, mark)
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}
