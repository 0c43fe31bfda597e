// Package batch owns the record batch format: Kafka RecordBatch v2 (magic 2), byte for byte.
// It encodes batches (Builder), checks them (ParseHeader, Validate), walks their records
// (Decode) and rewrites the two fields a broker owns (SetBaseOffset, SetLeaderEpoch).
//
// The package is pure: it must not do I/O, hold files, know about segments, partitions or
// sockets, or keep state between calls other than reusable compression state. A broker
// stores exactly the bytes a producer sent (after rewriting base offset and leader epoch)
// and serves them back unchanged, so nothing here may normalise or re-encode a batch that
// came from outside.
//
// # Batch layout
//
// All integers are big-endian. The header is HeaderSize (61) bytes; the CRC covers bytes
// 21 to the end of the batch, so the broker can rewrite baseOffset and
// partitionLeaderEpoch without recomputing it.
//
//	 0                   8              12                  16 17            21
//	+-------------------+--------------+-------------------+--+-------------+
//	| baseOffset int64  | length int32 | leaderEpoch int32 |m | crc uint32  |   m = magic int8 (2)
//	+-------------------+--------------+-------------------+--+-------------+
//	 21           23                  27                      35                      43
//	+------------+-------------------+-----------------------+-----------------------+
//	| attr int16 | lastOffsetDelta   | baseTimestamp int64   | maxTimestamp int64    |
//	+------------+-------------------+-----------------------+-----------------------+
//	 43                      51              53                57             61
//	+-----------------------+---------------+-----------------+--------------+------ - -
//	| producerId int64      | prodEpoch i16 | baseSequence i32| count int32  | records...
//	+-----------------------+---------------+-----------------+--------------+------ - -
//	                                                          |<-- crc covers 21..end -->|
//	length = batch size - 12 (bytes after the length field)
//
// attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp
// type (1 = log append time), bit 4 transactional, bit 5 control batch. When the codec is
// not none, the records section is one compressed blob holding the concatenated records.
//
// The layout above, the attribute bits and the constants HeaderSize and MagicV2 are the
// Kafka wire format and ringlog's on-disk format: they must never change. A change would
// make every stored segment unreadable and every Kafka client incompatible.
//
// # Record layout
//
// Each record is a zig-zag varint length (bytes that follow), then:
//
//	+------------+-----------------+------------------+-----------------+-----+
//	| attr int8  | tsDelta varlong | offDelta varint  | keyLen varint   | key |
//	+------------+-----------------+------------------+-----------------+-----+
//	+-----------------+-------+--------------------+------------------------------+
//	| valueLen varint | value | headerCount varint | headers...                   |
//	+-----------------+-------+--------------------+------------------------------+
//	header: keyLen varint | key | valueLen varint | value
//
// A length of -1 means null (key, value, header value); header keys may not be null. Varints are protobuf-style zig-zag
// (sint32/sint64). A record's timestamp is baseTimestamp+tsDelta (or maxTimestamp for the
// whole batch when the timestamp type is log append time); its offset is baseOffset+offDelta.
//
// # Concurrency
//
// ParseHeader, Validate, Decode and the Set functions are safe for concurrent use. A
// Builder belongs to one goroutine. zstd encoders and decoders are process-wide and shared;
// gzip and lz4 stream state is pooled (codecs.go).
//
// # Limits and hostile input
//
// Every length read from a batch is checked against the bytes that remain before anything
// is sliced or allocated. A batch is at most MaxBatchBytes; its decompressed records are at
// most MaxDecompressedBytes. See docs/batch-format.md for the validation errors.
package batch
