"""Scrapy scheduling around the mannerly proxy's budget: see MannerlyMiddleware."""

from .middleware import MannerlyMiddleware, policy_delay, retry_after_secs

__all__ = ["MannerlyMiddleware", "policy_delay", "retry_after_secs"]
