"""The fields the middleware reads, as mannerly and origins write them."""

import unittest
from datetime import datetime, timezone

from scrapy_mannerly import policy_delay, retry_after_secs


class RetryAfter(unittest.TestCase):
    def test_seconds_and_dates(self):
        now = datetime(2026, 12, 6, 3, 59, 0, tzinfo=timezone.utc)
        self.assertEqual(retry_after_secs(b"60"), 60)
        self.assertEqual(retry_after_secs(b"0"), 0)
        self.assertEqual(retry_after_secs(b"Sun, 06 Dec 2026 04:00:00 GMT", now), 60)
        # A date already past: now.
        self.assertEqual(retry_after_secs(b"Sun, 06 Dec 2026 03:00:00 GMT", now), 0)
        for bad in (b"", b"soon", b"-1", b"1.5", None):
            self.assertIsNone(retry_after_secs(bad), bad)


class Policy(unittest.TestCase):
    def test_our_member_beside_the_origins(self):
        fields = [b'"day";q=1000;w=86400', b'"host";q=2;w=1']
        self.assertEqual(policy_delay(fields), 0.5)
        self.assertEqual(policy_delay([b'"day";q=1000;w=86400, "host";q=1;w=4']), 4.0)

    def test_none_without_a_usable_host_member(self):
        for fields in ([], [b'"day";q=10;w=60'], [b'"host";q=0;w=1'], [b'"host";w=1']):
            self.assertIsNone(policy_delay(fields), fields)


if __name__ == "__main__":
    unittest.main()
