// Package factory speaks to a Talos Image Factory: it registers the
// schematics node groups declare (POST /schematics), so that the factory
// can serve the installers their machines install from. A factory builds
// installers only of schematics it was given; the ID RezusCloud computes
// (domain.Schematic.ID) must be the one the factory answers, which every
// registration checks. The apply worker and the upgrade saga use it through
// interfaces of their own; cmd wires it.
package factory
