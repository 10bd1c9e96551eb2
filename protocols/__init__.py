"""The wire protocol specification, installed as ``rcvgp.protocols`` so the conformance kit can read it."""
