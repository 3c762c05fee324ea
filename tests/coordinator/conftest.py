import pytest


@pytest.fixture(params=["uniform", "range"])
def real_assignor(request):
    """The built-in assignors from cohort.assignors, resolved through the registry."""
    return request.param
