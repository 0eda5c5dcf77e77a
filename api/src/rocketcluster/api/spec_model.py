"""What every spec model of the custom resources shares: camelCase aliases, no unknown
fields, frozen values, and the schema hints for Kubernetes (list maps, quantities)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Lists keyed by name merge item by item under server-side apply.
LIST_MAP_BY_NAME: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
}


class SpecModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"
Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=32)]
