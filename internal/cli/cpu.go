package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// CPU is a CPU bound flag, held in thousandths of a CPU as the API
// has it, and written in CPUs ("0.5", "2") or in thousandths with the
// suffix m ("500m"), as container tools write them. 0 is no bound.
type CPU int

func (c CPU) String() string {
	return strconv.FormatFloat(float64(c)/1000, 'f', -1, 64)
}

func (c *CPU) Set(v string) error {
	m, err := ParseCPU(v)
	if err != nil {
		return err
	}
	*c = CPU(m)
	return nil
}

// ParseCPU reads a CPU bound into thousandths of a CPU. Finer values than
// a thousandth, signs and exponents are refused rather than rounded.
func ParseCPU(v string) (int, error) {
	bad := fmt.Errorf("%q is not a number of CPUs (0.5, 2) or of thousandths of a CPU (500m)", v)
	digits := func(s string) bool {
		return strings.Trim(s, "0123456789") == ""
	}
	if n, ok := strings.CutSuffix(v, "m"); ok {
		if n == "" || len(n) > 9 || !digits(n) {
			return 0, bad
		}
		m, _ := strconv.Atoi(n)
		return m, nil
	}
	whole, frac, _ := strings.Cut(v, ".")
	if whole == "" && frac == "" || len(whole) > 6 || len(frac) > 3 || !digits(whole) || !digits(frac) {
		return 0, bad
	}
	w, _ := strconv.Atoi("0" + whole)
	f, _ := strconv.Atoi((frac + "000")[:3])
	return w*1000 + f, nil
}
