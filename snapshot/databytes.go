package snapshot

// DataBytes is the bytes of content the file or link entry e (of a tree
// of this repository) references: its Size, or for a sparse file the sum
// of its data extents (its map read and checked), never its holes, as
// btrfs counts a sparse file's extents only. Quotas of what checkpoints
// hold count these. Call it holding Shared.
func (r *Repo) DataBytes(e Entry) (int64, error) {
	if !e.Sparse {
		return e.Size, nil
	}
	m, err := r.readMap(e.Hash)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, x := range m.extents {
		n += x.len
	}
	return n, nil
}
