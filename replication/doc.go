// Package replication will own follower fetchers, the ISR, the high watermark, leader epochs
// and the controller. Not built yet: ringlog is single-node today.
package replication
