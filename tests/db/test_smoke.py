from __future__ import annotations

from pgbus_flask.engine import Engine
from tests.support import work
from tests.workflows import ThreeSteps


def test_three_steps_run_to_the_end(engine: Engine) -> None:
    run = ThreeSteps.start(7, order_id=21, subject=("Order", 21))
    assert run.status == "ready"
    work(engine)
    run.refresh()
    assert run.status == "finished", run.events()
    assert run.outputs() == {"reserve": {"reserved": 21, "args": [7]}, "charge": 42, "ship": "shipped 42"}
