module github.com/ringlog/ringlog

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/cockroachdb/datadriven v1.0.3
	github.com/klauspost/compress v1.20.4
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/sys v0.50.0
)

require github.com/pmezard/go-difflib v1.0.0 // indirect
