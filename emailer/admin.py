from django.contrib import admin

from emailer.models import SendEmailTask


@admin.register(SendEmailTask)
class SendEmailTaskAdmin(admin.ModelAdmin):
    list_display = ("name", "subject", "created_at")
    search_fields = ("name", "subject")
