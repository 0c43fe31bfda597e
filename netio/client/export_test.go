package client

// Murmur2ForTest exposes murmur2 to the external test package.
var Murmur2ForTest = murmur2
