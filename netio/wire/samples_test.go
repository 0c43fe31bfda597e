package wire

// sampleRequests and sampleResponses hold one populated message per API; tests and fuzz
// seeds are built from them.
func sampleRequests() []Message {
	return []Message{
		&APIVersionsRequest{ClientID: "ringlog-go"},
		&ProduceRequest{Acks: AcksAll, TimeoutMs: 5000, Topics: []ProduceTopic{
			{Topic: "orders", Partitions: []ProducePartition{{Partition: 0, Records: []byte("batch-0")}, {Partition: 3, Records: nil}}},
			{Topic: "payments", Partitions: []ProducePartition{{Partition: 1, Records: []byte{}}}},
		}},
		&FetchRequest{MaxWaitMs: 500, MinBytes: 1, MaxBytes: 1 << 20, Topics: []FetchTopic{
			{Topic: "orders", Partitions: []FetchPartition{{Partition: 0, FetchOffset: 42, MaxBytes: 1 << 20}, {Partition: 7, FetchOffset: 0, MaxBytes: 4096}}},
		}},
		&ListOffsetsRequest{Topics: []ListOffsetsTopic{
			{Topic: "orders", Partitions: []ListOffsetsPartition{{0, TimestampEarliest}, {1, TimestampLatest}, {2, 1_700_000_000_000}}},
		}},
		&MetadataRequest{Topics: []string{"orders", "payments"}},
		&MetadataRequest{},
		&CreateTopicsRequest{TimeoutMs: 1000, ValidateOnly: true, Topics: []CreateTopic{
			{Topic: "orders", Partitions: 8, ReplicationFactor: 1, Configs: []ConfigEntry{{"retention.ms", "86400000"}, {"cleanup.policy", "delete"}}},
		}},
		&CreateTopicsRequest{Version: 1, TimeoutMs: 30000, Topics: []CreateTopic{{Topic: "orders", Partitions: 1, ReplicationFactor: -1}}},
		&DeleteTopicsRequest{TimeoutMs: 1000, Topics: []string{"orders"}},
		&DeleteTopicsRequest{Version: 1, TimeoutMs: 0, Topics: []string{"orders", "payments"}},
		&DescribeTopicsRequest{Topics: []string{"orders"}},
		&DescribeConfigsRequest{Topics: []DescribeConfigsTopic{{Topic: "orders", Keys: []string{"retention.ms"}}, {Topic: "payments"}}},
		&AlterConfigsRequest{ValidateOnly: false, Topics: []AlterConfigsTopic{
			{Topic: "orders", Configs: []AlterConfig{{"retention.ms", AlterConfigSet, "1000"}, {"segment.bytes", AlterConfigDelete, ""}}},
		}},
		&AlterConfigsRequest{Version: 1, ValidateOnly: true, TimeoutMs: 2000, Topics: []AlterConfigsTopic{
			{Topic: "orders", Configs: []AlterConfig{{"retention.ms", AlterConfigSet, "1000"}}},
		}},
		&InitProducerIDRequest{Name: "billing-writer", ProducerID: -1, ProducerEpoch: -1},
		&InitProducerIDRequest{ProducerID: 4000, ProducerEpoch: 3},
		&FindCoordinatorRequest{Group: "billing"},
		&JoinGroupRequest{Group: "billing", InstanceID: "host-1", ClientID: "ringlog-go", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 300000, ProtocolType: "consumer",
			Protocols: []GroupProtocol{{Name: "cooperative-sticky", Metadata: []byte{0, 3, 0, 0, 0, 1}}, {Name: "range", Metadata: nil}}},
		&JoinGroupRequest{Version: 1, Group: "billing", MemberID: "ringlog-go-7", ClientID: "ringlog-go", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 300000,
			ProtocolType: "consumer", Protocols: []GroupProtocol{{Name: "range", Metadata: []byte{0, 3}}}},
		&SyncGroupRequest{Group: "billing", MemberID: "c-1", Generation: 4, ProtocolType: "consumer", Protocol: "range",
			Assignments: []SyncGroupAssignment{{MemberID: "c-1", Assignment: []byte{0, 1}}, {MemberID: "c-2", Assignment: []byte{}}}},
		&HeartbeatRequest{Group: "billing", MemberID: "c-1", Generation: 4},
		&LeaveGroupRequest{Group: "billing", Members: []GroupMemberRef{{MemberID: "c-1"}, {InstanceID: "host-2"}}},
		&OffsetCommitRequest{Group: "billing", MemberID: "c-1", Generation: 4, Topics: []OffsetCommitTopic{
			{Topic: "orders", Partitions: []OffsetCommitPartition{{Partition: 0, Offset: 42, LeaderEpoch: -1, Metadata: "m"}, {Partition: 3, Offset: 0, LeaderEpoch: 2}}}}},
		&OffsetFetchRequest{Group: "billing", Topics: []OffsetFetchTopic{{Topic: "orders", Partitions: []int32{0, 3}}}},
		&OffsetFetchRequest{Group: "billing"},
		&ListGroupsRequest{States: []string{"Stable", "Empty"}},
		&ListGroupsRequest{},
		&DescribeGroupsRequest{Groups: []string{"billing", "audit"}},
		&DeleteGroupsRequest{Groups: []string{"old"}},
		&ReplicaFetchRequest{ReplicaID: 2, MaxWaitMs: 500, MinBytes: 1, MaxBytes: 1 << 20, Topics: []ReplicaFetchTopic{
			{Topic: "orders", Partitions: []ReplicaFetchPartition{{Partition: 0, CurrentLeaderEpoch: 3, FetchOffset: 42, MaxBytes: 1 << 20}}},
		}},
		&OffsetsForLeaderEpochRequest{Topics: []OffsetsForLeaderEpochTopic{
			{Topic: "orders", Partitions: []OffsetsForLeaderEpochPartition{{0, 4, 3}, {1, 4, -1}}},
		}},
		&ControllerRequest{Op: ControllerSubmit, Body: []byte(`{"Type":2}`)},
		&ControllerRequest{Op: ControllerMetadata},
		&ControllerRequest{Op: ControllerSubmit, Body: []byte(`{"Type":13,"Finalize":{"Version":2}}`), ProtocolVersion: 2},
		&ReplicaFetchRequest{ReplicaID: 3, MaxWaitMs: 500, MinBytes: 1, MaxBytes: 1 << 20, ProtocolVersion: 2, Topics: []ReplicaFetchTopic{
			{Topic: "orders", Partitions: []ReplicaFetchPartition{{Partition: 1, CurrentLeaderEpoch: 4, FetchOffset: 7, MaxBytes: 1 << 20}}},
		}},
		&SaslHandshakeRequest{Mechanism: "SCRAM-SHA-512"},
		&QuotaGroupRequest{Group: "replay"},
		&ReplicaFetchWakeRequest{ReplicaID: 3},
		&QuotaGroupRequest{},
		&SaslAuthenticateRequest{AuthBytes: []byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO")},
		&SaslAuthenticateRequest{AuthBytes: []byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")},
		&DescribeUsersRequest{Users: []string{"alice"}},
		&DescribeUsersRequest{},
		&AlterUsersRequest{Upsertions: []UserUpsertion{{"alice", "SCRAM-SHA-256", 8192, []byte("salt"), []byte("salted password bytes")}},
			Deletions: []UserDeletion{{"bob", ""}, {"carol", "SCRAM-SHA-512"}}},
		&DescribeAclsRequest{Filter: ACLBinding{ResourceType: ACLResourceTopic, Principal: "User:alice"}},
		&CreateAclsRequest{ACLs: []ACLBinding{{ACLResourceTopic, "orders-", ACLPatternPrefixed, "User:alice", ACLOperationWrite, ACLPermissionAllow},
			{ACLResourceCluster, "", ACLPatternLiteral, "User:bob", ACLOperationCreate, ACLPermissionDeny}}},
		&DeleteAclsRequest{Filters: []ACLBinding{{Principal: "User:alice"}}},
	}
}

func sampleResponses() []Message {
	return []Message{
		&APIVersionsResponse{APIs: []APIVersionRange{{APIProduce, 0, 0}, {APIFetch, 0, 0}}, FrameBytesMax: FrameBytesMaxDefault, InflightPerConnMax: 64, BrokerVersion: "ringlog 0.1"},
		&ProduceResponse{ThrottleMs: 0, Topics: []ProduceResponseTopic{
			{Topic: "orders", Partitions: []ProduceResponsePartition{
				{Partition: 0, BaseOffset: 100, LogAppendTime: -1, LogStartOffset: 0},
				{Partition: 3, ErrorCode: ErrCorruptMessage, ErrorMessage: "crc mismatch at batch 0", BaseOffset: -1, LogAppendTime: -1, LogStartOffset: -1},
			}},
		}},
		&FetchResponse{ThrottleMs: 3, Topics: []FetchResponseTopic{
			{Topic: "orders", Partitions: []FetchResponsePartition{
				{Partition: 0, HighWatermark: 200, LogStartOffset: 10, Records: []byte("some batches")},
				{Partition: 7, ErrorCode: ErrOffsetOutOfRange, ErrorMessage: "offset 9 below log start 10", HighWatermark: 200, LogStartOffset: 10},
			}},
		}},
		&ListOffsetsResponse{Topics: []ListOffsetsResponseTopic{
			{Topic: "orders", Partitions: []ListOffsetsResponsePartition{{Partition: 0, Timestamp: -1, Offset: 10}, {Partition: 9, ErrorCode: ErrUnknownTopicOrPartition, ErrorMessage: "no partition 9", Timestamp: -1, Offset: -1}}},
		}},
		&MetadataResponse{BrokerID: 1, Shards: []MetadataShard{{0, "127.0.0.1:9400"}, {1, "127.0.0.1:9401"}}, Topics: []MetadataTopic{
			{Topic: "orders", Partitions: []MetadataPartition{{Partition: 0, Shard: 0}, {Partition: 1, Shard: 1}}},
			{Topic: "nope", ErrorCode: ErrUnknownTopicOrPartition, ErrorMessage: "unknown topic"},
		}},
		&MetadataResponse{Version: 1, BrokerID: 2, Shards: []MetadataShard{{0, ""}}, Topics: []MetadataTopic{
			{Topic: "orders", Partitions: []MetadataPartition{
				{Partition: 0, LeaderEpoch: 3, Leader: 2, Replicas: []int32{2, 3, 1}, ISR: []int32{2, 3}, HighWatermark: 1200},
				{Partition: 1, LeaderEpoch: 1, Leader: -1, Replicas: []int32{3}, ISR: []int32{3}, HighWatermark: -1},
			}},
		}, Brokers: []MetadataBroker{{1, "127.0.0.1:9401", "a", true}, {2, "127.0.0.1:9402", "b", false}}, ControllerID: 2},
		&CreateTopicsResponse{Topics: []TopicResult{{"orders", ErrNone, ""}, {"dup", ErrTopicAlreadyExists, "topic dup already exists"}}},
		&DeleteTopicsResponse{Topics: []TopicResult{{"orders", ErrNone, ""}}},
		&DescribeTopicsResponse{Topics: []DescribeTopic{{Topic: "orders", Partitions: []DescribePartition{{0, ErrNone, 0, 0, 100, 100, 65536, "", 0}, {1, ErrCorruptMessage, 1, 0, 90, 90, 4096, "1 corrupt batch(es)", 1}}}}},
		&DescribeConfigsResponse{Topics: []DescribeConfigsResult{{Topic: "orders", Configs: []ConfigDescription{{"retention.ms", "86400000", ConfigSourceTopic, false}, {"segment.bytes", "1073741824", ConfigSourceDefault, false}}}}},
		&AlterConfigsResponse{Topics: []TopicResult{{"orders", ErrInvalidConfig, "retention.ms: not a number"}}},
		&InitProducerIDResponse{ProducerID: 4000, ProducerEpoch: 4},
		&InitProducerIDResponse{ErrorCode: ErrInvalidProducerEpoch, ErrorMessage: "name is at epoch 5", ProducerID: -1, ProducerEpoch: -1},
		&FindCoordinatorResponse{Shard: 1, Address: "127.0.0.1:9401"},
		&FindCoordinatorResponse{ErrorCode: ErrCoordinatorNotAvailable, ErrorMessage: "shutting down", Shard: -1},
		&JoinGroupResponse{Generation: 4, ProtocolType: "consumer", Protocol: "range", Leader: "c-1", MemberID: "c-1",
			Members: []JoinGroupMember{{MemberID: "c-1", Metadata: []byte{0, 3}}, {MemberID: "c-2", InstanceID: "host-2", Metadata: nil}}},
		&JoinGroupResponse{ErrorCode: ErrInvalidSessionTimeout, Generation: -1},
		&SyncGroupResponse{ProtocolType: "consumer", Protocol: "range", Assignment: []byte{0, 1, 0, 0}},
		&HeartbeatResponse{ErrorCode: ErrRebalanceInProgress},
		&LeaveGroupResponse{Members: []LeaveGroupResult{{MemberID: "c-1"}, {InstanceID: "host-2", ErrorCode: ErrUnknownMemberID}}},
		&OffsetCommitResponse{Topics: []OffsetCommitResponseTopic{{Topic: "orders", Partitions: []PartitionError{{0, ErrNone}, {3, ErrIllegalGeneration}}}}},
		&OffsetFetchResponse{Topics: []OffsetFetchResponseTopic{{Topic: "orders", Partitions: []OffsetFetchPartition{{0, 42, -1, "m", ErrNone}, {3, -1, -1, "", ErrNone}}}}},
		&ListGroupsResponse{Groups: []ListedGroup{{"audit", "consumer", "Empty"}, {"billing", "consumer", "Stable"}}},
		&DescribeGroupsResponse{Groups: []DescribedGroup{{Group: "billing", State: "Stable", ProtocolType: "consumer", Protocol: "range", Generation: 4, Leader: "c-1",
			Members: []DescribedMember{{MemberID: "c-1", ClientID: "ringlog-go", ClientHost: "127.0.0.1", SessionTimeoutMs: 10000, RebalanceTimeoutMs: 300000, Metadata: []byte{0}, Assignment: []byte{1}}}},
			{Group: "nobody", State: "Dead", Generation: -1}}},
		&DeleteGroupsResponse{Groups: []GroupResult{{"old", ErrNone, ""}, {"busy", ErrNonEmptyGroup, "group busy has 2 members"}}},
		&ReplicaFetchResponse{Topics: []ReplicaFetchResponseTopic{
			{Topic: "orders", Partitions: []ReplicaFetchResponsePartition{
				{Partition: 0, HighWatermark: 40, LogStartOffset: 0, LogEndOffset: 50, Records: []byte("batches")},
				{Partition: 1, ErrorCode: ErrFencedLeaderEpoch, ErrorMessage: "epoch 2, leader's 3", HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1},
			}},
		}},
		&OffsetsForLeaderEpochResponse{Topics: []OffsetsForLeaderEpochResponseTopic{
			{Topic: "orders", Partitions: []OffsetsForLeaderEpochResponsePartition{{0, ErrNone, "", 3, 120}, {1, ErrNotLeaderOrWrongShard, "not the leader", -1, -1}}},
		}},
		&ControllerResponse{Body: []byte(`{"Version":7}`)},
		&ControllerResponse{ErrorCode: ErrNotController, ErrorMessage: "no controller leader"},
		&SaslHandshakeResponse{Mechanisms: []string{"SCRAM-SHA-512", "SCRAM-SHA-256"}},
		&SaslHandshakeResponse{ErrorCode: ErrUnsupportedSaslMechanism, ErrorMessage: "PLAIN is not offered", Mechanisms: []string{"SCRAM-SHA-512"}},
		&SaslAuthenticateResponse{AuthBytes: []byte("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")},
		&SaslAuthenticateResponse{AuthBytes: []byte("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="), Principal: "User:user"},
		&SaslAuthenticateResponse{ErrorCode: ErrSaslAuthenticationFailed, ErrorMessage: "authentication failed"},
		&QuotaGroupResponse{},
		&QuotaGroupResponse{ErrorCode: ErrGroupAuthorizationFailed, ErrorMessage: "read on group replay denied"},
		&ReplicaFetchWakeResponse{Woken: true},
		&ReplicaFetchWakeResponse{},
		&DescribeUsersResponse{Users: []UserDescription{{"alice", []UserMechanism{{"SCRAM-SHA-256", 8192}, {"SCRAM-SHA-512", 4096}}}}},
		&AlterUsersResponse{Results: []UserResult{{"alice", ErrNone, ""}, {"bob", ErrInvalidRequest, "no such user"}}},
		&DescribeAclsResponse{ACLs: []ACLBinding{{ACLResourceGroup, "billing", ACLPatternLiteral, "User:alice", ACLOperationRead, ACLPermissionAllow}}},
		&CreateAclsResponse{Results: []TopicResult{{"", ErrNone, ""}, {"", ErrInvalidRequest, "unknown operation 9"}}},
		&DeleteAclsResponse{Deleted: []ACLBinding{{ACLResourceTopic, "orders", ACLPatternLiteral, "User:alice", ACLOperationAll, ACLPermissionDeny}}},
	}
}
