package ring

// moveStack recurses through about 256 KiB of frames, so the calling goroutine's stack grows
// and is copied to a new place whenever it was smaller than that (a new goroutine's is, and
// so is one the garbage collector has shrunk). Memory the kernel was handed that lived on
// that stack then stays behind at the old address: a completion written there is lost to
// the caller, which turns the bug into a failure instead of a rare corruption. With -tags
// invariants the reactor calls it before every blocking wait (RunOnce, the FileIO calls),
// so the engine and netio tests that drive a reactor check it too; ring's own tests use
// forceStackMove, which also makes the move certain. Never called in production builds.
func moveStack() { growStack(0, stackMoveFrames) }

// stackMoveFrames is moveStack's recursion depth: 64 frames of 4 KiB, a 256 KiB stack.
const stackMoveFrames = 64

// growStack recurses until depth reaches frames, each frame 4 KiB.
//
//go:noinline
func growStack(depth, frames int) byte {
	var frame [4096]byte
	frame[depth%len(frame)] = byte(depth)
	if depth < frames {
		return frame[(depth*7)%len(frame)] + growStack(depth+1, frames)
	}
	return frame[0]
}
