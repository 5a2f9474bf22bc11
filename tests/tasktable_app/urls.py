"""A view that enqueues a Django task inside its transaction, as a project's views do."""

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.urls import path

from tests.tasktable_app.tasks import add


def enqueue_add(request: HttpRequest) -> HttpResponse:
    with transaction.atomic():
        result = add.enqueue(int(request.GET["a"]), int(request.GET["b"]))
    return HttpResponse(str(result.id))


urlpatterns = [path("enqueue/", enqueue_add)]
