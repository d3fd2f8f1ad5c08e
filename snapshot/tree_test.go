package snapshot

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func sampleTree() (Tree, counts) {
	return Tree{
		{Name: "a dir", Kind: KindDir, Mode: 0o2755, Hash: sum([]byte("t"))},
		{Name: "exec", Kind: KindFile, Mode: 0o755, Size: 1 << 40, Hash: sum([]byte("f"))},
		{Name: "link", Kind: KindLink, Size: 11, Hash: sum([]byte("/etc/passwd"))},
		{Name: "z\xff\n", Kind: KindFile, Mode: 0o600, Hash: sum(nil)},
	}, counts{files: 300, links: 2, dirs: 7, bytes: 1 << 40}
}

func TestTreeEncoding(t *testing.T) {
	tree, c := sampleTree()
	data := encodeTree(nil, tree, c)
	got, gotC, err := decodeTree(data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, tree) || gotC != c {
		t.Fatalf("round trip: got %v %v, want %v %v", got, gotC, tree, c)
	}
	// Every strict prefix fails, never panics.
	for n := range len(data) {
		if _, _, err := decodeTree(data[:n]); err == nil {
			t.Errorf("prefix of %d bytes decoded", n)
		}
	}
}

func TestTreeValidation(t *testing.T) {
	tree, c := sampleTree()
	for _, tc := range []struct {
		name   string
		change func(t Tree) Tree
	}{
		{"unsorted", func(t Tree) Tree { t[0], t[1] = t[1], t[0]; return t }},
		{"duplicate", func(t Tree) Tree { t[1].Name = t[0].Name; return t }},
		{"empty name", func(t Tree) Tree { t[0].Name = ""; return t }},
		{"dot", func(t Tree) Tree { t[0].Name = "."; return t }},
		{"dotdot", func(t Tree) Tree { t[0].Name = ".."; return t }},
		{"slash", func(t Tree) Tree { t[0].Name = "a/b"; return t }},
		{"nul", func(t Tree) Tree { t[0].Name = "a\x00"; return t }},
		{"long name", func(t Tree) Tree { t[3].Name = strings.Repeat("z", 256); return t }},
		{"unknown kind", func(t Tree) Tree { t[1].Kind = 9; return t }},
		{"kind zero", func(t Tree) Tree { t[1].Kind = 0; return t }},
		{"mode too big", func(t Tree) Tree { t[1].Mode = 0o10000; return t }},
		{"link with a mode", func(t Tree) Tree { t[2].Mode = 0o777; return t }},
		{"folder with a size", func(t Tree) Tree { t[0].Size = 1; return t }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.change(slices.Clone(tree))
			_, _, err := decodeTree(encodeTree(nil, bad, c))
			if !errors.Is(err, errCorrupt) {
				t.Errorf("got %v, want a corrupt tree error", err)
			}
		})
	}
	t.Run("trailing bytes", func(t *testing.T) {
		data := append(encodeTree(nil, tree, c), 0)
		if _, _, err := decodeTree(data); !errors.Is(err, errCorrupt) {
			t.Errorf("got %v, want a corrupt tree error", err)
		}
	})
	t.Run("not minimal varint", func(t *testing.T) {
		data := encodeTree(nil, nil, counts{})
		data[len(data)-1] = 0x80
		data = append(data, 0)
		if _, _, err := decodeTree(data); !errors.Is(err, errCorrupt) {
			t.Errorf("got %v, want a corrupt tree error", err)
		}
	})
	t.Run("name of 255 bytes", func(t *testing.T) {
		ok := Tree{{Name: strings.Repeat("n", 255), Kind: KindFile}}
		if _, _, err := decodeTree(encodeTree(nil, ok, counts{})); err != nil {
			t.Errorf("got %v, want none", err)
		}
	})
}

// FuzzDecodeTree: any input decodes or fails, never panics, and what
// decodes encodes back to the same bytes (one tree, one encoding).
// Run it with: go test -run '^$' -fuzz FuzzDecodeTree -fuzztime 30s ./snapshot/
func FuzzDecodeTree(f *testing.F) {
	tree, c := sampleTree()
	f.Add(encodeTree(nil, tree, c))
	f.Add(encodeTree(nil, nil, counts{}))
	f.Add([]byte("wt\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, c, err := decodeTree(data)
		if err != nil {
			return
		}
		if again := encodeTree(nil, got, c); string(again) != string(data) {
			t.Fatalf("decoded %v, which encodes to %q, not %q", got, again, data)
		}
	})
}
