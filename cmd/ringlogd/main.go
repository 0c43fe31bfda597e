// Command ringlogd is the ringlog broker.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "ringlogd: the broker is not built yet (see issue: single-node broker)")
	os.Exit(1)
}
