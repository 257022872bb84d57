"""Routes under construction."""

from __future__ import annotations

__all__ = ["router"]

from fastapi import APIRouter

router = APIRouter()
