"""make test's scheduling: every module of the scale lab (tests/lab/scale/) is one unit of xdist's
work, so one worker deploys the scale lab once for all of them (tests/conftest.py)."""

from types import SimpleNamespace

from tests.conftest import SCALE_DIR, ScaleLabOnce, pytest_xdist_make_scheduler


def test_the_scale_modules_are_one_scope_the_others_their_module():
    scheduler = object.__new__(ScaleLabOnce)  # _split_scope reads nothing of the session
    assert scheduler._split_scope(f"{SCALE_DIR}test_router.py::test_rolling") == SCALE_DIR
    assert scheduler._split_scope(f"{SCALE_DIR}test_tp.py::test_hang") == SCALE_DIR
    assert scheduler._split_scope("tests/lab/test_deploy.py::test_x") == "tests/lab/test_deploy.py"
    assert scheduler._split_scope("tests/lab/test_deploy.py::Case::test_y") == "tests/lab/test_deploy.py::Case"


def test_other_distributions_keep_xdists_scheduler():
    assert pytest_xdist_make_scheduler(SimpleNamespace(getvalue=lambda name: "load"), log=None) is None
