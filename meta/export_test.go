package meta

// SetListPage sets how many records the etcd store reads per page of a
// list, until the returned function restores it.
func SetListPage(n int64) (restore func()) {
	old := listPage
	listPage = n
	return func() { listPage = old }
}
