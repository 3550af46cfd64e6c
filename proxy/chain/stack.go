package chain

// growFrame is the frame growStack puts on the stack: with the ~1.5 KiB a
// request's goroutine has used when the short chain starts, the runtime must
// give it a 16 KiB stack at once.
const growFrame = 8 << 10

// growStack grows the calling goroutine's stack to what a proxied request
// needs, while the goroutine is still shallow.
//
// The HTTP/2 server starts a goroutine per request, and the runtime gives a
// new goroutine a stack the size of the average in use it has scanned, which
// the many idle connection readers keep small. The short chain
// (authentication, audit, authorization) and the reverse proxy below it need
// about 16 KiB: without this a request's stack grew twice, deep in the chain,
// and the runtime copied it and adjusted every frame each time, a measurable
// share of the gateway's CPU per proxied GET (docs/benchmark-history.md,
// "What changed, and what each change bought"). Growing it here
// copies a few frames once. A request that needed less (a refusal, an
// error) keeps the stack only until its goroutine ends; an open watch's
// stack is 16 KiB either way.
//
//go:noinline
func growStack(i int) byte {
	var frame [growFrame]byte
	frame[i%growFrame] = 1 // an index known only at run time keeps the frame
	return frame[0]
}
