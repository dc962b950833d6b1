"""Realistic reply bodies written for this project, one per mail client habit.

Each case is (id, body, expected visible text). The bodies follow what the clients
actually produce in their text/plain part (attribution formats, wrapping, signatures).
"""

from __future__ import annotations

REPLIES: list[tuple[str, str, str]] = [
    (
        "gmail_top_post",
        "Sounds good, let's move the call to Thursday at 3pm.\n"
        "\n"
        "On Tue, 14 Jan 2025 at 09:12, My Assistant <assistant@example.com> wrote:\n"
        "\n"
        "> I found two free slots: Wednesday 10am and Thursday 3pm.\n"
        "> Which one should I book?\n"
        ">\n",
        "Sounds good, let's move the call to Thursday at 3pm.",
    ),
    (
        "gmail_wrapped_attribution",
        "Yes please, book it.\n"
        "\n"
        "On Tue, Jan 14, 2025 at 9:12 AM My Assistant <assistant@example.com>\n"
        "wrote:\n"
        "\n"
        "> Shall I book the table for four at 8pm?\n",
        "Yes please, book it.",
    ),
    (
        "gmail_with_signature",
        "Please forward the invoice to accounting.\n"
        "\n"
        "-- \n"
        "Jane Doe\n"
        "Head of Operations, Example Ltd\n"
        "+44 20 7946 0000\n"
        "\n"
        "On Mon, 13 Jan 2025 at 17:40, My Assistant <assistant@example.com> wrote:\n"
        "> The invoice from Acme arrived (EUR 1,200).\n",
        "Please forward the invoice to accounting.",
    ),
    (
        "outlook_desktop_separator",
        "Hi,\r\n"
        "\r\n"
        "Can you summarise the contract changes in three bullet points?\r\n"
        "\r\n"
        "Thanks,\r\n"
        "Jane\r\n"
        "\r\n"
        "-----Original Message-----\r\n"
        "From: My Assistant <assistant@example.com>\r\n"
        "Sent: Monday, January 13, 2025 5:40 PM\r\n"
        "To: Jane Doe <jane@example.com>\r\n"
        "Subject: Contract draft v3\r\n"
        "\r\n"
        "The third draft of the contract is attached.\r\n",
        "Hi,\n\nCan you summarise the contract changes in three bullet points?\n\nThanks,\nJane",
    ),
    (
        "outlook_underscore_block",
        "Approved. Go ahead with the order.\n"
        "\n"
        "________________________________\n"
        "From: My Assistant <assistant@example.com>\n"
        "Sent: Tuesday, 14 January 2025 10:02\n"
        "To: Jane Doe <jane@example.com>\n"
        "Subject: Order 4411 needs approval\n"
        "\n"
        "Order 4411 (3 monitors) needs your approval.\n",
        "Approved. Go ahead with the order.",
    ),
    (
        "outlook_web_no_separator",
        "Not this week, maybe next Monday.\n"
        "\n"
        "From: My Assistant <assistant@example.com>\n"
        "Sent: Wednesday, January 15, 2025 8:01 AM\n"
        "To: jane@example.com <jane@example.com>\n"
        "Subject: Dentist appointment\n"
        "\n"
        "Your dentist asks whether you can come in this week.\n",
        "Not this week, maybe next Monday.",
    ),
    (
        "outlook_android_mobile",
        "Call them back tomorrow morning please\n"
        "\n"
        "Get Outlook for Android<https://aka.ms/AAb9ysg>\n"
        "________________________________\n"
        "From: My Assistant <assistant@example.com>\n"
        "Sent: Wednesday, January 15, 2025 11:20:33 AM\n"
        "To: Jane Doe <jane@example.com>\n"
        "Subject: Missed call from the bank\n"
        "\n"
        "The bank called at 11:05.\n",
        "Call them back tomorrow morning please",
    ),
    (
        "apple_mail_top_post",
        "Perfect, thank you!\n"
        "\n"
        "> On 15 Jan 2025, at 12:03, My Assistant <assistant@example.com> wrote:\n"
        "> \n"
        "> Your train tickets for Friday are booked.\n"
        "> \n",
        "Perfect, thank you!",
    ),
    (
        "apple_mail_attribution_unquoted",
        "Can you also check the return train?\n"
        "\n"
        "On 15 Jan 2025, at 12:03, My Assistant <assistant@example.com> wrote:\n"
        "\n"
        "> Your train tickets for Friday are booked.\n",
        "Can you also check the return train?",
    ),
    (
        "iphone_mail",
        "Yes, 7pm works\n"
        "\n"
        "Sent from my iPhone\n"
        "\n"
        "> On Jan 15, 2025, at 6:10 PM, My Assistant <assistant@example.com> wrote:\n"
        "> \n"
        "> \ufeffShould I confirm dinner with Tom at 7pm?\n",
        "Yes, 7pm works",
    ),
    (
        "android_gmail_app_german",
        "Ja, bitte den Termin bestätigen.\n"
        "\n"
        "Am Mi., 15. Jan. 2025 um 18:10 Uhr schrieb My Assistant <\n"
        "assistant@example.com>:\n"
        "\n"
        "> Soll ich den Termin beim Zahnarzt bestätigen?\n",
        "Ja, bitte den Termin bestätigen.",
    ),
    (
        "thunderbird_bottom_post",
        "On 15/01/2025 18:10, My Assistant wrote:\n"
        "> The server backup failed last night (disk full).\n"
        "\n"
        "Delete the snapshots older than 30 days and run it again.\n"
        "\n"
        "-- \n"
        "Jane\n",
        "Delete the snapshots older than 30 days and run it again.",
    ),
    (
        "thunderbird_inline_reply",
        "On 15.01.25 18:10, My Assistant wrote:\n"
        "> 1. Renew the domain (expires Friday)?\n"
        "\n"
        "Yes.\n"
        "\n"
        "> 2. Cancel the old VPS?\n"
        "\n"
        "No, keep it until March.\n"
        "\n"
        "> 3. Pay the hosting invoice?\n"
        "\n"
        "Already done.\n",
        "Yes.\n\nNo, keep it until March.\n\nAlready done.",
    ),
    (
        "french_webmail",
        "Merci, c'est parfait.\n"
        "\n"
        "Le mer. 15 janv. 2025 à 18:10, My Assistant <assistant@example.com> a écrit :\n"
        "\n"
        "> La réservation est confirmée.\n",
        "Merci, c'est parfait.",
    ),
    (
        "spanish_mobile",
        "Perfecto, gracias\n"
        "\n"
        "Enviado desde mi iPhone\n"
        "\n"
        "El 15 ene 2025, a las 18:10, My Assistant <assistant@example.com> escribió:\n"
        "\n"
        "> He reservado la mesa.\n",
        "Perfecto, gracias",
    ),
    (
        "yahoo_android_unquoted_history",
        "Remind me again on Sunday evening.\n"
        "\n"
        "Sent from Yahoo Mail on Android\n"
        "\n"
        "  On Wed, 15 Jan 2025 at 18:10, My Assistant<assistant@example.com> wrote:\n"
        "  The plumber can come on Monday at 9.\n",
        "Remind me again on Sunday evening.",
    ),
    (
        "slash_command_then_quote",
        "/new\n"
        "Let's plan the trip to Lisbon.\n"
        "\n"
        "On Wed, 15 Jan 2025 at 18:10, My Assistant <assistant@example.com> wrote:\n"
        "> Anything else?\n",
        "/new\nLet's plan the trip to Lisbon.",
    ),
    (
        "signature_no_quote_keeps_dashes_in_text",
        "The budget is 2,000 -- not 20,000 -- please correct the draft.\n"
        "\n"
        "Cheers\n"
        "--\n"
        "Jane Doe | Example Ltd\n",
        "The budget is 2,000 -- not 20,000 -- please correct the draft.\n\nCheers",
    ),
    (
        "german_outlook_header_block",
        "Bitte bis Freitag erledigen.\n"
        "\n"
        "Von: My Assistant <assistant@example.com>\n"
        "Gesendet: Mittwoch, 15. Januar 2025 18:10\n"
        "An: Jane Doe <jane@example.com>\n"
        "Betreff: Steuererklärung\n"
        "\n"
        "Die Unterlagen für die Steuererklärung fehlen noch.\n",
        "Bitte bis Freitag erledigen.",
    ),
    # Forwards: the forwarded message is what the owner wants read, not history (it used
    # to be cut at its header block, leaving the bare marker line as the whole turn).
    (
        "gmail_forward_with_note",
        "Can you add this to my calendar?\n"
        "\n"
        "Sent from my iPhone\n"
        "\n"
        "---------- Forwarded message ---------\n"
        "From: Alice Example <alice@example.net>\n"
        "Date: Mon, 13 Jan 2025 at 18:02\n"
        "Subject: Dinner on Friday\n"
        "To: Jane Doe <jane@example.com>\n"
        "\n"
        "\n"
        "Dinner at 8pm on Friday at Luigi's, 12 Main St.\n"
        "Alice\n",
        "Can you add this to my calendar?\n"
        "\n"
        "---------- Forwarded message ---------\n"
        "From: Alice Example <alice@example.net>\n"
        "Date: Mon, 13 Jan 2025 at 18:02\n"
        "Subject: Dinner on Friday\n"
        "To: Jane Doe <jane@example.com>\n"
        "\n"
        "\n"
        "Dinner at 8pm on Friday at Luigi's, 12 Main St.\n"
        "Alice",
    ),
    (
        "apple_mail_forward_alone",
        "\n"
        "Begin forwarded message:\n"
        "\n"
        "From: Alice Example <alice@example.net>\n"
        "Subject: Dinner on Friday\n"
        "Date: 13 January 2025 at 18:02:11 CET\n"
        "To: Jane Doe <jane@example.com>\n"
        "\n"
        "Dinner at 8pm on Friday.\n",
        "Begin forwarded message:\n"
        "\n"
        "From: Alice Example <alice@example.net>\n"
        "Subject: Dinner on Friday\n"
        "Date: 13 January 2025 at 18:02:11 CET\n"
        "To: Jane Doe <jane@example.com>\n"
        "\n"
        "Dinner at 8pm on Friday.",
    ),
    (
        "thunderbird_forward_german",
        "Zur Info.\n"
        "\n"
        "-------- Weitergeleitete Nachricht --------\n"
        "Betreff: Abendessen\n"
        "Datum: Mon, 13 Jan 2025 18:02:11 +0100\n"
        "Von: Alice <alice@example.net>\n"
        "An: Jane <jane@example.com>\n"
        "\n"
        "Freitag um 20 Uhr.\n",
        "Zur Info.\n"
        "\n"
        "-------- Weitergeleitete Nachricht --------\n"
        "Betreff: Abendessen\n"
        "Datum: Mon, 13 Jan 2025 18:02:11 +0100\n"
        "Von: Alice <alice@example.net>\n"
        "An: Jane <jane@example.com>\n"
        "\n"
        "Freitag um 20 Uhr.",
    ),
    (
        "gmail_reply_to_a_forward_drops_the_quoted_forward",
        "Done, it is in the calendar.\n"
        "\n"
        "On Mon, 13 Jan 2025 at 18:05, Jane Doe <jane@example.com> wrote:\n"
        "> Can you add this to my calendar?\n"
        ">\n"
        "> ---------- Forwarded message ---------\n"
        "> From: Alice Example <alice@example.net>\n"
        "> Dinner at 8pm.\n",
        "Done, it is in the calendar.",
    ),
    # A list typed with dashes on a phone: its items are not "-Name" sign-offs (they
    # used to be dropped one by one from the bottom, the whole list with them).
    (
        "iphone_dash_list",
        "Add to my shopping list:\n-eggs\n-Milk\n-Bread\n\nSent from my iPhone\n",
        "Add to my shopping list:\n-eggs\n-Milk\n-Bread",
    ),
    (
        "dash_list_then_signoff",
        "Todo for tomorrow:\n-Call mum\n\nThanks\n-John\n",
        "Todo for tomorrow:\n-Call mum\n\nThanks",
    ),
    # A request laid out like a header block (From/To/Date) is the request, not history:
    # it used to be cut at "From: Berlin", leaving "Please book me a flight:".
    (
        "travel_request_from_to_date",
        "Please book me a flight:\nFrom: Berlin\nTo: Lisbon\nDate: Friday 14 March\n"
        "Seat: aisle\n\nSent from my iPhone\n",
        "Please book me a flight:\nFrom: Berlin\nTo: Lisbon\nDate: Friday 14 March\nSeat: aisle",
    ),
    (
        "outlook_block_without_subject_but_with_address",
        "Fine by me.\n\nFrom: My Assistant <assistant@example.com>\nTo: Jane Doe\n"
        "Date: 14 January 2025 09:13\n\nShall I book?\n",
        "Fine by me.",
    ),
    # "On <topic>, <name> wrote:" in the sender's own words, with no date or address,
    # is not an attribution: what follows used to be dropped as unquoted history.
    (
        "own_words_look_like_an_attribution",
        "Two things.\nOn the budget, Anna wrote:\nwe are 10% over. Can you check why?\n",
        "Two things.\nOn the budget, Anna wrote:\nwe are 10% over. Can you check why?",
    ),
    (
        "unquoted_history_after_a_dated_attribution",
        "Yes, Thursday.\n\nOn Tue, Jan 14, 2025 at 9:12 AM My Assistant wrote:\n"
        "Which day suits you?\n",
        "Yes, Thursday.",
    ),
]
