package replicas

import "hash/fnv"

// Owner returns the replica of live that owns key, by rendezvous (highest
// random weight) hashing: every replica that sees the same live replicas
// picks the same owner whatever their order; a replica that joins takes
// about 1/N of the keys from the others, one that leaves hands only its own
// keys over, spread over the others. "" when live is empty.
func Owner(key string, live []string) string {
	var owner string
	var best uint64
	for _, r := range live {
		if w := weight(r, key); owner == "" || w > best || w == best && r < owner {
			owner, best = r, w
		}
	}
	return owner
}

// weight is the rendezvous weight of key on replica r: FNV-1a of both (the
// same on every replica, unlike hash/maphash), mixed by the splitmix64
// finalizer so that names that differ in a few bytes weigh independently.
func weight(r, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(r))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
