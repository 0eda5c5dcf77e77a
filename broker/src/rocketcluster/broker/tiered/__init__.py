"""Tiered storage: per topic/queue segments of confirmed messages copied by the master
to a shared volume or S3, read back through the normal receive and query paths once
local retention has removed them (DESIGN §4)."""
