package mcp

// ResultText is resultText, for the tests of package mcp_test.
var ResultText = resultText
