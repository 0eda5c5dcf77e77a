"""The broker management plane: FastAPI admin, health and metrics."""
