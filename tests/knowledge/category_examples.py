"""A small labelled set for the offline category classifier: memories a personal
assistant and a game master would store, each with the default categories it
belongs to (written for mnemex; ``misc`` where none fits). Used by
tests/knowledge/test_categories.py (precision and recall floors) and
bench/knowledge.py (the threshold's trade-off)."""

from __future__ import annotations

EXAMPLES: list[tuple[str, tuple[str, ...]]] = [
    # personal details
    ("The user's name is Priya and she is 34 years old", ("personal_details",)),
    ("The user lives in Lisbon", ("personal_details",)),
    ("John was born in Toronto and moved to Berlin in 2019", ("personal_details",)),
    ("The user speaks Portuguese and a little Japanese", ("personal_details",)),
    ("Her birthday is on the 3rd of March", ("personal_details",)),
    # preferences
    ("The user loves spicy Thai food", ("preferences",)),
    ("Alex prefers window seats on flights", ("preferences",)),
    ("The user hates horror movies", ("preferences",)),
    ("Her favourite band is Radiohead", ("preferences",)),
    ("The user enjoys hiking on weekends", ("preferences",)),
    # plans
    ("The user plans to visit Japan next spring", ("plans",)),
    ("Sam is going to start a new course in September", ("plans", "education")),
    ("The user has a dentist appointment tomorrow at 9", ("plans", "health")),
    ("The user wants to run a marathon someday", ("plans", "health")),
    # relationships
    ("The user's sister Anna is a nurse", ("relationships", "work")),
    ("Tom is married to Lucy", ("relationships",)),
    ("The user has a dog called Biscuit", ("relationships",)),
    ("Her best friend Carla lives next door", ("relationships", "personal_details")),
    ("The user's father retired last year", ("relationships",)),
    # work
    ("The user works as a software engineer at a startup", ("work",)),
    ("Maria got promoted to manager in May", ("work",)),
    ("The user's boss wants the report by Friday", ("work",)),
    ("He has a meeting with a client every Monday", ("work",)),
    # education
    ("The user studied physics at university", ("education",)),
    ("Ben is writing his PhD thesis on glaciers", ("education",)),
    ("She graduated from college in 2015", ("education",)),
    # health
    ("The user is allergic to peanuts", ("health",)),
    ("Mark takes medication for asthma", ("health",)),
    ("The user is vegetarian", ("health", "preferences")),
    ("She injured her knee while running", ("health",)),
    ("The user sleeps badly since the surgery", ("health",)),
    # events
    ("The user attended a jazz concert last week", ("events",)),
    ("Her cousin's wedding happened in June", ("events", "relationships")),
    ("The user met Carla at a festival two years ago", ("events",)),
    ("The party fought a battle at the bridge yesterday", ("events", "location")),
    # lore
    ("The ancient kingdom of Vael fell to a dragon", ("lore",)),
    ("Legends say the goddess Ilmara forged the first ring", ("lore", "items")),
    ("The Order of the Ash is a cult that worships the old gods", ("lore",)),
    ("A prophecy foretells the return of the cursed king", ("lore",)),
    ("Magic in this realm comes from the moons", ("lore",)),
    # rules
    ("House rule: a natural 1 on a d20 always fails", ("rules",)),
    ("Roll initiative at the start of each round", ("rules",)),
    ("Stealth checks are made with advantage in darkness", ("rules",)),
    ("Each spell slot recovers after a long rest", ("rules",)),
    ("Players may take one bonus action per turn", ("rules",)),
    # quests
    ("The party's quest is to rescue the miller's daughter", ("quests",)),
    ("The guild offered a reward for hunting the wolves", ("quests",)),
    ("The mayor asked the heroes to investigate the missing sheep", ("quests",)),
    ("Their mission is to escort the caravan to the coast", ("quests",)),
    ("A bounty of 200 gold is posted for the bandit leader", ("quests", "items")),
    # npc relationships
    ("The innkeeper Mira distrusts the party", ("npc_relationship",)),
    ("Captain Rell is an ally of the heroes", ("npc_relationship",)),
    ("The smith holds a grudge against the rogue", ("npc_relationship",)),
    ("The baron is hostile to strangers", ("npc_relationship",)),
    ("Lady Senna trusts the cleric after the trial", ("npc_relationship",)),
    # locations
    ("The tower of Ash stands on the cliffs north of the river", ("location",)),
    ("The tavern sits at the crossroads of the old road", ("location",)),
    ("The dungeon lies beneath the ruins of the temple", ("location",)),
    ("Port Vessa is a harbour town on the western sea", ("location",)),
    ("The village of Brill is deep in the forest", ("location",)),
    # favours owed
    ("Gandros the wizard owes the party a favour since the rescue", ("favor_owed",)),
    ("The thief promised to repay his debt in silver", ("favor_owed",)),
    ("The party owes the priestess for healing Bram", ("favor_owed",)),
    ("The duke is indebted to the ranger", ("favor_owed",)),
    # items
    ("The fighter carries a silver sword and a shield", ("items",)),
    ("The party found three healing potions in the chest", ("items",)),
    ("The user bought a new bike", ("items",)),
    ("Elda wears an amulet of warding", ("items",)),
    # nothing fits
    ("Hello there", ("misc",)),
    ("Okay, sounds good", ("misc",)),
    ("The weather is grey today", ("misc",)),
    ("Let us continue", ("misc",)),
]
