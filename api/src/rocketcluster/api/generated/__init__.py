"""Generated gRPC stubs (python -m rocketcluster.api.protogen); do not edit."""
