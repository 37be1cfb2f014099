"""Leader election on a coordination.k8s.io Lease: of N operator replicas, one acts.

The standby blocks in `acquire()`; the leader renews in a background thread and exits the
process if it cannot renew before the lease expires (another replica may then act). A leader
that stops cleanly `release()`s the lease, so a standby takes over at its next try instead of
waiting for the lease to expire.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client

__all__ = ["LeaseElector"]

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        name: str,
        namespace: str,
        identity: str,
        duration_seconds: float = 15.0,
    ) -> None:
        self._api = client.CoordinationV1Api(api_client)
        self._name = name
        self._namespace = namespace
        self.identity = identity
        self._duration = duration_seconds

    def _try(self) -> bool:
        now = _now()
        try:
            lease = self._api.read_namespaced_lease(self._name, self._namespace)
        except client.ApiException as err:
            if err.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self._name, namespace=self._namespace),
                spec=client.V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=int(self._duration),
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=0,
                ),
            )
            try:
                self._api.create_namespaced_lease(self._namespace, body)
            except client.ApiException as create_err:
                if create_err.status == 409:
                    return False
                raise
            return True
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        holder = spec.holder_identity
        renewed = spec.renew_time
        expired = renewed is None or (now - renewed).total_seconds() > (
            spec.lease_duration_seconds or self._duration
        )
        if holder not in (None, "", self.identity) and not expired:
            return False
        if holder != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = int(self._duration)
        try:
            # resourceVersion in the body makes this a compare-and-swap.
            self._api.replace_namespaced_lease(self._name, self._namespace, lease)
        except client.ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    @property
    def retry_seconds(self) -> float:
        return self._duration / 3

    def acquire(self, on_try: Callable[[], None] = lambda: None) -> None:
        """Block until this process holds the lease; `on_try` runs after every attempt (the
        standby's heartbeat)."""
        announced = False
        while True:
            try:
                if self._try():
                    break
            except client.ApiException as err:
                log.warning("lease %s/%s: %s", self._namespace, self._name, err.reason)
            on_try()
            if not announced:
                log.info(
                    "standing by: lease %s/%s held by another replica", self._namespace, self._name
                )
                announced = True
            time.sleep(self.retry_seconds)
        on_try()
        log.info("acquired lease %s/%s as %s", self._namespace, self._name, self.identity)

    def release(self) -> bool:
        """Give the lease up if we hold it (a clean stop); True when it was ours."""
        try:
            lease = self._api.read_namespaced_lease(self._name, self._namespace)
        except client.ApiException as err:
            log.warning("could not release lease %s/%s: %s", self._namespace, self._name, err)
            return False
        spec = lease.spec
        if spec is None or spec.holder_identity != self.identity:
            return False
        now = _now()
        spec.holder_identity = None
        spec.lease_duration_seconds = 1
        spec.renew_time = now
        spec.acquire_time = now
        try:
            self._api.replace_namespaced_lease(self._name, self._namespace, lease)
        except client.ApiException as err:
            log.warning("could not release lease %s/%s: %s", self._namespace, self._name, err)
            return False
        log.info("released lease %s/%s", self._namespace, self._name)
        return True

    def keep_renewing(self) -> threading.Thread:
        def loop() -> None:
            last_ok = time.monotonic()
            while True:
                time.sleep(self.retry_seconds)
                try:
                    if self._try():
                        last_ok = time.monotonic()
                        continue
                    log.error("lost lease %s/%s; exiting", self._namespace, self._name)
                except client.ApiException as err:
                    log.warning("lease renewal failed: %s", err)
                    if time.monotonic() - last_ok < self._duration:
                        continue
                os._exit(1)

        thread = threading.Thread(target=loop, name="lease-renewal", daemon=True)
        thread.start()
        return thread
