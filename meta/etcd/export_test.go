package etcd

// SetListPage sets how many records s reads per page of a list. Call it
// before s is used.
func SetListPage(s *Store, n int64) { s.listPage = n }
