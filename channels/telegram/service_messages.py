"""Which Telegram messages someone said, and which are the chat's own notices.

A service message (a member joined, a title changed, a checklist task ticked, a gift
or a payment arrived) is not something anyone said: it is skipped, never recorded as
words nor answered. Before session 27 the list stopped at the service messages of an
older Bot API: a task ticked in a shared checklist, a poll option added, the group's
owner leaving, a payment came as ``[checklist tasks done]`` and the like, from the
member who did it, and a ``respond: always`` group had the assistant answer them.

Every content type aiogram knows is in exactly one of the two sets below (a test says
so), so a newer aiogram's types are sorted when it is upgraded, not found in a group.
"""

from __future__ import annotations

SERVICE_TYPES = frozenset(
    {
        # members, titles, photos, pins
        "new_chat_members",
        "left_chat_member",
        "new_chat_title",
        "new_chat_photo",
        "delete_chat_photo",
        "group_chat_created",
        "supergroup_chat_created",
        "channel_chat_created",
        "migrate_to_chat_id",
        "migrate_from_chat_id",
        "pinned_message",
        "message_auto_delete_timer_changed",
        "chat_owner_left",
        "chat_owner_changed",
        "chat_background_set",
        "boost_added",
        "write_access_allowed",
        "managed_bot_created",
        "community_chat_added",
        "community_chat_joined",
        "community_chat_removed",
        # forum topics, video chats
        "forum_topic_created",
        "forum_topic_edited",
        "forum_topic_closed",
        "forum_topic_reopened",
        "general_forum_topic_hidden",
        "general_forum_topic_unhidden",
        "video_chat_scheduled",
        "video_chat_started",
        "video_chat_ended",
        "video_chat_participants_invited",
        # changes to what was said before: a checklist ticked, a poll's options
        "checklist_tasks_done",
        "checklist_tasks_added",
        "poll_option_added",
        "poll_option_deleted",
        "proximity_alert_triggered",
        # gifts, payments, prices, giveaways, channel posts suggested
        "gift",
        "unique_gift",
        "gift_upgrade_sent",
        "successful_payment",
        "refunded_payment",
        "paid_message_price_changed",
        "direct_message_price_changed",
        "giveaway_created",
        "giveaway_completed",
        "suggested_post_approved",
        "suggested_post_approval_failed",
        "suggested_post_declined",
        "suggested_post_paid",
        "suggested_post_refunded",
        # answers to buttons and apps this bot never offers, a site login
        "users_shared",
        "user_shared",
        "chat_shared",
        "web_app_data",
        "connected_website",
        "passport_data",
    }
)

# What people send: recorded, as text or a placeholder (channels/telegram/media.py).
# "unknown" is a shape aiogram cannot name (a newer Bot API): kept, as "[unknown]".
CONTENT_TYPES = frozenset(
    {
        "text",
        "animation",
        "audio",
        "checklist",
        "contact",
        "dice",
        "document",
        "game",
        "giveaway",
        "giveaway_winners",
        "invoice",
        "live_photo",
        "location",
        "paid_media",
        "photo",
        "poll",
        "rich_message",
        "sticker",
        "story",
        "venue",
        "video",
        "video_note",
        "voice",
        "unknown",
        "any",  # aiogram's filter value, never a message's type
    }
)
