"""The conformance runner: any client of the distlock protocol, beside Python distlock
processes, on real servers (docs/protocol.md, "Conformance"). ``python -m tests.conformance
-- CLIENT_COMMAND ...``; the client speaks the line protocol of tests/conformance/README.md."""
