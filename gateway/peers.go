package gateway

// allowed reports whether uid may use the API: this process's own uid,
// root, or one of Config.AllowUIDs.
func (g *Gateway) allowed(uid uint32) bool {
	return uid == g.uid || uid == 0 || g.allow[uid]
}
