"""The AToMesh router: `atomesh launch ... --backend atom`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .args import Options
from .registry import FrontendBase, register_frontend

if TYPE_CHECKING:
    from ..design.plan import Plan


@register_frontend("atomesh")
class Atomesh(FrontendBase):
    command = ("atomesh", "launch")
    backend = "atom"
    owned_flags = frozenset({"host", "port", "pd-disaggregation", "prefill", "decode", "worker-urls", "backend",
                             "policy", "log-level", "prometheus-port", "worker-startup-timeout-secs"})

    def options(self, plan: Plan) -> Options:
        r = plan.recipe
        o = Options(self.owned_flags)
        o.set("--host", "0.0.0.0")
        o.set("--port", plan.router.port)
        if r.mode == "disagg":
            o.set("--pd-disaggregation")
            for e in plan.role_endpoints("prefill"):
                o.append("--prefill", e.url)
            for e in plan.role_endpoints("decode"):
                o.append("--decode", e.url)
        else:
            o.set("--worker-urls", *(e.url for e in plan.role_endpoints("worker")))
        o.set("--policy", r.router.policy)
        o.set("--backend", self.backend)
        o.set("--log-level", r.router.log_level)
        o.set("--prometheus-port", plan.router.prometheus_port)
        # AToMesh gives up on the workers after 1800 s by default; a model that loads for longer (the
        # DeepSeek recipes allow 2500 s) would end in "Timed out waiting for workers" while atomdeck
        # still waits. The router never gives up before atomdeck does (workers, then the router), so
        # a hang is diagnosed by atomdeck, naming the node and port, not by the router's summary.
        o.set("--worker-startup-timeout-secs", math.ceil(r.health.worker_timeout_s + r.health.router_timeout_s))
        o.add_recipe_args(r.router.args, "router.args")
        return o

    def env(self, plan: Plan) -> dict[str, str]:
        env = dict(plan.cluster.env)
        env.update(plan.recipe.env)
        env.update(plan.recipe.router.env)
        return env
