package controller

import (
	"slices"
	"sync"
	"time"
)

// absorber keeps in memory the changes to keys whose entry is in the queue
// bucket and not taken by a run yet. Such a key runs anyway, and its run
// reads the read model as it is when it starts, so an event for it needs no
// queue write (a get and an update per event and controller): only its time
// and source are kept, here, and handed to the run with the entry. Losing
// them (the lease moves) loses nothing but that detail: the entry is in the
// bucket.
//
// The scheduler opens a key when the bucket reports an entry (a put) and
// takes it when a run starts from that entry; an event that finds the key
// closed writes the bucket as before, which a run in flight sees as a
// follow-up.
type absorber struct {
	mu   sync.Mutex
	keys map[string]*absorbed
	// max bounds the sources kept (0: all).
	max int
	// moved wakes the scheduler when an absorbed change moves a key's
	// Last: its debounce counts from there. movedKeys are those keys, until
	// the scheduler takes them.
	moved     chan struct{}
	movedKeys map[string]struct{}
}

// absorbed are the changes of one open key.
type absorbed struct {
	last    time.Time
	sources []string
}

func newAbsorber(maxSources int) *absorber {
	return &absorber{keys: map[string]*absorbed{}, max: maxSources, moved: make(chan struct{}, 1), movedKeys: map[string]struct{}{}}
}

// absorb records a change to key when key is open, and reports whether it did.
func (a *absorber) absorb(key, source string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.keys[key]
	if k == nil {
		return false
	}
	if now.After(k.last) {
		k.last = now
		a.movedKeys[key] = struct{}{}
		select {
		case a.moved <- struct{}{}:
		default:
		}
	}
	if source != "" && !slices.Contains(k.sources, source) {
		k.sources = append(k.sources, source)
		if a.max > 0 && len(k.sources) > a.max {
			k.sources = k.sources[len(k.sources)-a.max:]
		}
	}
	return true
}

// takeMoved returns the keys whose Last moved since the last call.
func (a *absorber) takeMoved() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := make([]string, 0, len(a.movedKeys))
	for k := range a.movedKeys {
		keys = append(keys, k)
	}
	clear(a.movedKeys)
	return keys
}

// open marks key's entry as in the bucket and untaken.
func (a *absorber) open(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys[key] == nil {
		a.keys[key] = &absorbed{}
	}
}

// take closes key and returns e with the changes absorbed since it opened.
func (a *absorber) take(key string, e Entry) (Entry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.keys[key]
	delete(a.keys, key)
	return k.merge(e, a.max), k != nil && (!k.last.IsZero() || len(k.sources) > 0)
}

// peek returns e with the changes absorbed for key, leaving key open.
func (a *absorber) peek(key string, e Entry) Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys[key].merge(e, a.max)
}

func (k *absorbed) merge(e Entry, maxSources int) Entry {
	if k == nil {
		return e
	}
	if k.last.After(e.Last) {
		e.Last = k.last
	}
	if len(k.sources) > 0 {
		src := slices.Clone(e.Sources)
		for _, s := range k.sources {
			if !slices.Contains(src, s) {
				src = append(src, s)
			}
		}
		if maxSources > 0 && len(src) > maxSources {
			src = src[len(src)-maxSources:]
		}
		e.Sources = src
	}
	return e
}

// keysOf lists the open keys match accepts.
func (a *absorber) keysOf(match func(key string) bool) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for k := range a.keys {
		if match(k) {
			out = append(out, k)
		}
	}
	return out
}
