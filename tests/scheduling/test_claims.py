import pytest
from scheduling import services
from scheduling.models import Job

@pytest.mark.django_db
def test_probe(make_job, now):
    j = make_job()
    assert Job.objects.count() == 1
    print(j.next_due_at, j.next_occurrence_at)
