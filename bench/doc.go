// Package bench owns ringlog's benchmark suite. The broker never imports it.
package bench
