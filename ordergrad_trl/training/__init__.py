"""Layer 2: the TRL integration, `OrderGradConfig` (a GRPOConfig) and `OrderGradTrainer` (a GRPOTrainer)."""

from .config import OrderGradConfig
from .trainer import OrderGradTrainer

__all__ = ["OrderGradConfig", "OrderGradTrainer"]
