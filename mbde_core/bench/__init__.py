"""Speed benchmarks (command modules printing tables; never run by the test suite)."""
