package device

// WithTopology applies a topology configuration in one option: the source
// (WithTopologySource), the explicit rings when there are any (WithRings)
// and the network table when one is named (WithNetworkTable). Both daemons
// build their discoverer from the config's topology section with it.
func WithTopology(source string, rings [][]string, networkTable string) Option {
	return func(s *Sysfs) {
		WithTopologySource(source)(s)
		if len(rings) > 0 {
			WithRings(rings)(s)
		}
		if networkTable != "" {
			WithNetworkTable(networkTable)(s)
		}
	}
}
