"""The category vocabulary. Labels are i18n keys the shell translates; icons are its icon names."""

CATEGORIES = (
    ("productivity", "task-list"),
    ("developer-tools", "code"),
    ("data", "database"),
    ("ai", "sparkles"),
    ("automation", "workflow"),
    ("communication", "chat"),
    ("files", "folder"),
    ("media", "image"),
    ("search", "search"),
    ("security", "shield"),
    ("system", "cpu"),
    ("finance", "chart"),
    ("education", "book"),
    ("other", "puzzle"),
)

IDS = tuple(cid for cid, _ in CATEGORIES)


def categories():
    return [{"id": cid, "labelKey": f"plugin.category.{cid}", "icon": icon} for cid, icon in CATEGORIES]
