"""Word lists and sentence templates for the synthetic training data (all written for kvtax)."""

# The harness's 50 vault names (src/harness/transcript.cpp) come first; the rest widen the pool so the
# model learns to look names up rather than memorise a few.
NAMES = """Aurora Basalt Cinder Dovewing Ember Falcon Garnet Harbor Indigo Juniper Kestrel Lantern Meadow Nimbus
Obsidian Pioneer Quartz Raven Sierra Thistle Umber Vertex Willow Xenon Yarrow Zephyr Alder Bramble Cobalt Drift
Equinox Fjord Glacier Heron Ironwood Jasper Kelp Lichen Marble Nectar Onyx Pewter Quill Russet Saffron Tundra
Umbra Velvet Wren Yucca
Acorn Amber Anvil Apex Arbor Ash Aspen Atlas Azure Badger Beacon Birch Bison Blaze Bluebell Boulder Bracken
Breeze Briar Brook Cairn Canyon Cardinal Cascade Cedar Chestnut Cicada Citadel Clover Comet Copper Coral Cove
Crane Crimson Crystal Cypress Dahlia Dawn Delta Dune Eagle Echo Elm Emerald Falcon Fern Finch Firefly Flint
Foxglove Frost Gale Gannet Geyser Ginger Granite Grove Gull Harrier Hawthorn Hazel Heather Hemlock Hollow
Horizon Hyacinth Iris Ivory Ivy Jackal Jade Jetty Kite Lagoon Larch Lark Laurel Lotus Lynx Magnet Magpie
Mallow Maple Marsh Mesa Mica Mimosa Mistral Monsoon Moss Nettle Nova Oak Oasis Ocelot Olive Opal Orchid
Osprey Otter Paddock Palisade Pebble Pelican Pepper Petrel Pine Plover Poplar Prairie Prism Puffin Quarry
Quince Rainier Rapids Reef Ridge Robin Rowan Ruby Sable Sage Sandpiper Sapphire Sedge Shale Sorrel Sparrow
Spruce Starling Stone Summit Swift Sycamore Talon Tamarack Tansy Tern Thorn Thunder Timber Topaz Torrent
Trillium Tulip Valley Vireo Violet Walnut Warbler Wasp Wharf Whisper Wildfire Wolf Yew Zenith Zinnia""".split()
NAMES = list(dict.fromkeys(NAMES))  # stable order, no duplicates

PLACES = ["north campus", "south annex", "main library", "east wing", "west garage", "science building",
          "visitor centre", "old warehouse", "print shop", "staff canteen", "harbour office", "river depot",
          "hill station", "central yard", "lower hall", "upper gallery", "rail shed", "market square"]

# Facilities style (the harness's own filler is of this kind).
FACILITIES = [
    "The morning walk-through found the lobby clean and the doors unlocked on time.",
    "Both elevators ran on their normal schedule all day.",
    "Heating held steady at the usual setting through the afternoon.",
    "The loading dock received a delivery of office paper that was shelved before noon.",
    "A light in the stairwell was replaced after a routine check.",
    "The parking lot was swept as planned and the gates were oiled.",
    "The recycling bins were emptied and the carts were returned to the shed.",
    "The visitor log showed the usual number of guests and nothing out of the ordinary.",
    "Window cleaners finished the ground floor and will return next week for the rest.",
    "The fire doors were tested and closed properly on every floor.",
    "A leaking tap in the second-floor kitchen was tightened by the on-site technician.",
    "Grounds staff trimmed the hedges along the main path and raked the leaves.",
    "The backup generator ran its weekly test for ten minutes without issue.",
    "Air filters in the meeting rooms were changed on the regular rotation.",
    "Mail was sorted and delivered to each department before lunch.",
    "The coffee machine on the third floor was descaled and restocked.",
    "No items require escalation at this time.",
    "Nothing needs follow-up beyond the usual schedule.",
    "All systems are operating normally.",
    "No further action is needed today.",
    "Heating in the east wing held steady at the usual setting.",
    "The loading dock received two pallets of office paper shelved before noon.",
    "A light in the third-floor stairwell was replaced.",
    "The parking lot was swept as planned, the recycling bins were emptied, and the visitor log showed nothing out of the ordinary.",
    "The morning walk-through found the lobby clean and both elevators on their normal schedule.",
]

# Slot-filled templates of several styles: {a}..{e} are filled from the lists below.
SUBJECTS = ["the team", "the crew", "our group", "the night shift", "the visitors", "the new staff", "the inspector",
            "the gardener", "the driver", "the clerk", "the tenants", "the volunteers", "the students", "the cook"]
VERBS = ["checked", "cleaned", "painted", "moved", "counted", "repaired", "sorted", "measured", "labelled",
         "inspected", "stacked", "tested", "opened", "closed", "replaced", "carried", "packed", "swept"]
OBJECTS = ["the shelves", "the windows", "the old boxes", "the benches", "the lamps", "the tools", "the chairs",
           "the tables", "the fence", "the pipes", "the crates", "the books", "the gates", "the ladders",
           "the carpets", "the signs", "the plants", "the cables", "the doors", "the floors"]
TIMES = ["in the morning", "after lunch", "before noon", "in the afternoon", "late in the evening", "at dawn",
         "on Monday", "on Tuesday", "on Wednesday", "on Thursday", "on Friday", "over the weekend", "at night"]
WEATHER = ["light rain", "a cold wind", "clear skies", "thick fog", "warm sunshine", "low clouds", "a short storm",
           "steady drizzle", "bright frost", "a mild breeze"]
ADJ = ["quiet", "busy", "calm", "long", "short", "slow", "pleasant", "ordinary", "dull", "productive", "uneventful"]
FOODS = ["bread", "soup", "apples", "rice", "cheese", "tea", "coffee", "beans", "pears", "noodles", "porridge"]
ANIMALS = ["a fox", "two deer", "a heron", "some ducks", "a cat", "a small dog", "three crows", "a hare", "an owl"]

TEMPLATES = {
    "log": [
        "{S} {v} {o} {t}.", "{S} {v} {o} and then {v2} {o2}.", "It was a {adj} day and {s} {v} {o}.",
        "{S} {v} {o} {t}, as planned.", "Later {s} {v} {o} again.", "Nothing else happened {t}.",
        "The report notes that {s} {v} {o}.", "According to the log, {s} {v} {o} {t}.",
    ],
    "weather": [
        "The weather brought {w} {t}.", "There was {w} over the {p} {t}.", "By evening {w} had settled in.",
        "The forecast promised {w} for the {p}.", "Most of the day had {w} and a {adj} mood.",
        "Readings at the {p} showed {w} {t}.",
    ],
    "diary": [
        "Today was {adj}.", "I walked to the {p} {t} and saw {an}.", "We had {f} and {f2} for supper.",
        "My neighbour said the {p} was {adj} {t}.", "I read for an hour and then {v} {o}.",
        "In the garden I noticed {an} near {o}.", "Tomorrow I will visit the {p} again.",
    ],
    "meeting": [
        "The meeting at the {p} started {t}.", "The chair asked {s} to review {o}.",
        "Minutes from the last session were approved.", "A short discussion followed about {o}.",
        "It was agreed that {s} would handle {o} {t}.", "The next meeting is planned for the {p}.",
        "Members thanked {s} for a {adj} week.",
    ],
    "inventory": [
        "The store room holds {n} boxes of {f}.", "Stock of {o} was counted at {n} items.",
        "We ordered {n} more crates of {f}.", "The shelf near the {p} has {n} spare lamps.",
        "The count for {o} matched the last list.", "Order number {n} was delivered {t}.",
    ],
}


def template_words():
    """Every word the templates and lists can produce (for the vocabulary's whole-word merges)."""
    import re
    text = " ".join(FACILITIES + SUBJECTS + VERBS + OBJECTS + TIMES + WEATHER + ADJ + FOODS + ANIMALS + PLACES)
    for ts in TEMPLATES.values():
        text += " " + " ".join(ts)
    text += (" IMPORTANT The access code for the vault is What Which List Give Answer with just the codes code"
             " all vaults mentioned above in order Note that uses Reminder to open Record opens Security file"
             " Facilities report day Please remember Key of Entry one two three four five six seven eight nine ten"
             " Tell me belongs Each Here are Question Ticket number was closed reopened filed Serial Memo")
    words = set(re.findall(r"[A-Za-z]+", text))
    for w in list(words):
        if w[:1].isupper():
            words.add(w.lower())
        else:
            words.add(w.capitalize())
    return sorted(words) + NAMES
