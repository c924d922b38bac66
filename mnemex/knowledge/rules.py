"""The rule-based extractor: facts from what the user says about themselves, with no
model and no I/O (what mnemex runs when no LLM endpoint is configured).

It reads only the user's messages (after ``strip_injected``) and, clause by clause,
finds explicit requests ("remember that ...", "don't forget that ...", "note that
...") and first-person statements of a fixed set of *slots* (``SLOTS``): name, age,
where the user lives and comes from, work, studies, likes and dislikes, diet, health,
the people and pets in their life, languages, plans, possessions and life events.
Each fact is a short third-person sentence ("The user lives in Berlin.").

The same rules read those sentences back (and an offered memory, whether written by
this extractor, by a model or by the user in the first person): ``slot_of`` tells
which slot a fact fills, and a new statement is related to the offered memories it
meets. The same statement again is a ``duplicate``; a new value of a single-valued
slot (``SINGLE_VALUED``: name, age, residence, work) ``updates`` the memory that held
the old one; a statement of a multi-valued slot never updates (liking burgers does
not supersede liking pizza), it may only ``extend`` an offered memory it contains.

What is not a fact: questions, hypotheticals and conditionals, hedges ("I'm thinking
about ..."), negated statements (a rule applies only when the clause begins with the
user, or "my <relative>", as its subject, so "I don't live in Paris" matches nothing),
quoted and reported speech, chit-chat, text that reads like an assistant's, and
"love" of obviously unlovable things. English only; names and places in any script.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from mnemex.knowledge.facts import (
    ExtractedFact,
    ExtractionRequest,
    ExtractionResult,
    Relation,
    SourceMessage,
    strip_injected,
)

__all__ = ["SINGLE_VALUED", "SLOTS", "RulesExtractor", "slot_of"]


# -- slots ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Slot:
    kind: str
    categories: tuple[str, ...]
    confidences: tuple[float, ...]
    importance: float


_SLOTS: Final[dict[str, _Slot]] = {
    "name": _Slot("fact", ("personal_details",), (0.95,), 0.85),
    "age": _Slot("fact", ("personal_details",), (0.9,), 0.6),
    "residence": _Slot("fact", ("personal_details",), (0.9,), 0.75),
    "origin": _Slot("fact", ("personal_details",), (0.9,), 0.6),
    "work": _Slot("fact", ("work",), (0.9,), 0.7),
    "education": _Slot("fact", ("education",), (0.85,), 0.6),
    "likes": _Slot("preference", ("preferences",), (0.85,), 0.55),
    "dislikes": _Slot("preference", ("preferences",), (0.85,), 0.55),
    "diet": _Slot("preference", ("preferences", "health"), (0.85, 0.7), 0.8),
    "health": _Slot("fact", ("health",), (0.9,), 0.9),
    "relationship": _Slot("relationship", ("relationships",), (0.85,), 0.8),
    "pet": _Slot("relationship", ("relationships",), (0.85,), 0.7),
    "language": _Slot("fact", ("personal_details",), (0.85,), 0.6),
    "plan": _Slot("plan", ("plans",), (0.8,), 0.65),
    "possession": _Slot("fact", ("personal_details",), (0.8,), 0.5),
    "event": _Slot("event", ("events",), (0.8,), 0.65),
    "note": _Slot("fact", (), (), 0.9),
}

SLOTS: Final = tuple(_SLOTS)
"""What the rules recognise; ``note`` is an explicitly requested fact that fits no other."""

SINGLE_VALUED: Final = frozenset({"name", "age", "residence", "work"})
"""Slots with one value at a time: a new value updates the offered memory holding the old."""

_EXPLICIT_IMPORTANCE: Final = 0.9
_EXPLICIT_CONFIDENCE: Final = 0.95


@dataclass(frozen=True, slots=True)
class _Statement:
    """One thing a clause says: its ``slot``, the ``value`` compared across memories of a
    single-valued slot, the third-person ``content``, and the ``key`` that names the
    aspect of the slot (a nickname does not replace a name)."""

    slot: str
    value: str
    content: str
    key: str


# -- lexicons -------------------------------------------------------------------------------------
def _words(text: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split(",") if w.strip())


def _alt(words: Iterable[str]) -> str:
    """A regex alternation of ``words`` (longest first, so a phrase beats its prefix),
    ending at a word boundary."""
    ordered = sorted(set(words), key=lambda w: (-len(w), w))
    return "(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in ordered) + r")(?![\w-])"


_NUMBER_WORDS: Final = _words(
    "one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen, fourteen, "
    "fifteen, sixteen, seventeen, eighteen, nineteen, twenty, thirty, forty, fifty, sixty, seventy, "
    "eighty, ninety")
_COUNT: Final = _alt((*_NUMBER_WORDS, "a", "an", "several", "a couple of", "a few", "twin")) + r"|\d+"
_AGE_WORDS: Final = (r"(?:\d{1,3}|(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)"
                     r"(?:[- ](?:one|two|three|four|five|six|seven|eight|nine))?|ten|eleven|twelve|"
                     r"thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen)")

_FAMILY: Final = _words(
    "wife, husband, partner, spouse, girlfriend, boyfriend, fiancé, fiancée, fiance, fiancee, son, sons, "
    "daughter, daughters, kid, kids, child, children, baby, babies, toddler, toddlers, newborn, twins, "
    "teenager, teenagers, teen, teens, boys, girls, brother, brothers, sister, sisters, sibling, "
    "siblings, grandma, grandmother, granny, nana, grandpa, grandfather, granddad, grandparents, "
    "grandson, granddaughter, grandkids, grandchildren, grandsons, granddaughters, aunt, auntie, uncle, "
    "cousin, cousins, niece, nieces, nephew, nephews, stepson, stepdaughter, stepmom, stepmother, "
    "stepdad, stepfather, stepbrother, stepsister, in-laws, mother-in-law, father-in-law, "
    "sister-in-law, brother-in-law, son-in-law, daughter-in-law, best friend, bestie")
_PARENTS: Final = _words("mom, mum, mother, mommy, mama, dad, father, daddy, papa, parents, folks")
_OTHERS: Final = _words(
    "friend, friends, roommate, roommates, flatmate, housemate, boss, manager, coworker, co-worker, "
    "coworkers, colleague, colleagues, neighbor, neighbour, neighbors, neighbours, mentor, ex, "
    "ex-wife, ex-husband, ex-boyfriend, ex-girlfriend, landlord, landlady, classmate, teammate")
_RELATIVES: Final = (*_FAMILY, *_PARENTS, *_OTHERS)
_PLURAL_RELATIVES: Final = frozenset(_words(
    "sons, daughters, kids, children, babies, toddlers, twins, teenagers, teens, boys, girls, brothers, "
    "sisters, siblings, grandparents, grandkids, grandchildren, grandsons, granddaughters, cousins, "
    "nieces, nephews, in-laws, parents, folks, friends, roommates, coworkers, colleagues, neighbors, "
    "neighbours"))
_PETS: Final = _words(
    "dog, dogs, puppy, puppies, pup, cat, cats, kitten, kittens, kitty, parrot, budgie, cockatiel, "
    "hamster, gerbil, guinea pig, guinea pigs, rabbit, rabbits, bunny, turtle, tortoise, goldfish, "
    "betta, horse, horses, pony, lizard, gecko, iguana, snake, ferret, chinchilla, hedgehog, "
    "chickens, hens, retriever, golden retriever, labrador, beagle, poodle, pug, husky, corgi, "
    "greyhound, whippet, dachshund, terrier, collie, border collie, sheepdog, german shepherd, "
    "spaniel, chihuahua, bulldog, rottweiler, doberman, schnauzer, shih tzu, pomeranian, samoyed, "
    "dalmatian, labradoodle, cockapoo, mutt, tabby, siamese, maine coon, ragdoll, sphynx")
_CAR_BRANDS: Final = _words(
    "tesla, toyota, honda, subaru, ford, chevy, chevrolet, bmw, audi, mercedes, volkswagen, vw, volvo, "
    "kia, hyundai, nissan, mazda, jeep, dodge, lexus, porsche, fiat, mini, prius, civic, corolla, "
    "land rover, range rover, peugeot, renault, skoda, citroen, citroën, vespa, harley, ducati, yamaha, "
    "kawasaki, rivian, polestar, jaguar, ferrari, suzuki, mitsubishi, cadillac, buick, chrysler, acura, "
    "saab, alfa romeo, dacia, opel, vauxhall, byd")
_POSSESSIONS: Final = (*_CAR_BRANDS, *_words(
    "house, home, apartment, flat, condo, townhouse, cottage, cabin, farmhouse, bungalow, villa, car, "
    "truck, pickup, van, minivan, suv, motorcycle, motorbike, scooter, moped, e-bike, bicycle, boat, "
    "sailboat, yacht, kayak, canoe, rv, camper, campervan, caravan, piano, guitar, telescope, "
    "hot tub, allotment"))
_BUSINESSES: Final = _words(
    "bakery, shop, store, restaurant, cafe, café, coffee shop, pizzeria, bar, pub, company, business, "
    "startup, agency, clinic, practice, studio, salon, farm, firm, consultancy, brewery, bookshop, "
    "bookstore, gym, hotel, food truck, nonprofit, charity, daycare, team, department, garage, workshop, "
    "boutique, winery, vineyard, kitchen, deli, florist")
_JOBS: Final = _words(
    "accountant, actor, actress, administrator, advisor, adviser, agent, analyst, animator, architect, "
    "artist, assistant, associate, attorney, auditor, baker, banker, barber, barista, bartender, "
    "biologist, bookkeeper, builder, butcher, carpenter, cashier, ceo, cfo, cto, chef, chemist, cleaner, "
    "clerk, coach, coder, composer, consultant, contractor, cook, copywriter, counselor, counsellor, "
    "courier, curator, dancer, dentist, designer, detective, developer, dev, dietitian, director, doctor, "
    "driver, economist, editor, educator, electrician, engineer, entrepreneur, executive, farmer, "
    "firefighter, fisherman, founder, co-founder, cofounder, freelancer, gardener, geologist, "
    "hairdresser, historian, hygienist, illustrator, instructor, intern, interpreter, investor, janitor, "
    "journalist, judge, landscaper, lawyer, lecturer, librarian, lifeguard, locksmith, machinist, "
    "manager, marketer, mathematician, mechanic, midwife, miner, musician, nanny, nurse, nutritionist, "
    "officer, optometrist, optician, painter, paralegal, paramedic, pastor, pharmacist, photographer, "
    "physician, physicist, physio, physiotherapist, pilot, planner, plumber, poet, policeman, "
    "politician, postman, priest, principal, producer, professor, programmer, psychiatrist, "
    "psychologist, realtor, receptionist, recruiter, researcher, reporter, salesman, salesperson, "
    "scientist, secretary, singer, soldier, specialist, statistician, surgeon, surveyor, tailor, "
    "teacher, technician, therapist, trader, trainer, translator, tutor, underwriter, veterinarian, "
    "vet, waiter, waitress, welder, writer, youtuber, streamer, guard, caregiver, sysadmin, tester, "
    "strategist, sailor, teller, chiropractor, radiologist, pediatrician, paediatrician, cardiologist, "
    "dermatologist, ranger, dispatcher, foreman, inspector, investigator, operator, pharmacologist, "
    "lab tech, vet tech, social worker, carer, police officer, flight attendant, "
    "stay-at-home dad, stay-at-home mom, stay-at-home mum, stay-at-home parent")
_FIELDS: Final = _words(
    "sales, marketing, finance, tech, hr, consulting, education, healthcare, insurance, real estate, "
    "retail, construction, law, accounting, hospitality, logistics, advertising, banking, publishing, "
    "journalism, software, engineering, medicine, nursing, government, politics, academia, research")
_LANGUAGES: Final = _words(
    "english, spanish, french, german, italian, portuguese, dutch, swedish, norwegian, danish, finnish, "
    "icelandic, polish, czech, slovak, hungarian, romanian, bulgarian, greek, turkish, russian, "
    "ukrainian, serbian, croatian, bosnian, slovenian, albanian, lithuanian, latvian, estonian, arabic, "
    "hebrew, persian, farsi, urdu, hindi, bengali, punjabi, gujarati, marathi, tamil, telugu, kannada, "
    "malayalam, nepali, sinhala, mandarin, cantonese, chinese, japanese, korean, vietnamese, thai, "
    "khmer, burmese, malay, indonesian, tagalog, filipino, swahili, amharic, yoruba, igbo, hausa, zulu, "
    "xhosa, afrikaans, somali, catalan, basque, galician, welsh, irish, gaelic, latin, esperanto, asl, "
    "sign language, quechua, maori, hawaiian, armenian, georgian, azerbaijani, kazakh, uzbek, "
    "mongolian, tibetan, pashto, kurdish, yiddish, creole")
_DEMONYMS: Final = _words(
    "american, canadian, mexican, brazilian, argentinian, argentine, chilean, colombian, peruvian, "
    "venezuelan, cuban, british, english, scottish, welsh, irish, french, german, italian, spanish, "
    "portuguese, dutch, belgian, swiss, austrian, swedish, norwegian, danish, finnish, icelandic, polish, "
    "czech, slovak, hungarian, romanian, bulgarian, greek, turkish, russian, ukrainian, serbian, "
    "croatian, bosnian, albanian, lithuanian, latvian, estonian, israeli, lebanese, syrian, iraqi, "
    "iranian, persian, egyptian, moroccan, algerian, tunisian, nigerian, ghanaian, kenyan, ethiopian, "
    "somali, south african, indian, pakistani, bangladeshi, sri lankan, nepali, nepalese, chinese, "
    "japanese, korean, vietnamese, thai, filipino, filipina, indonesian, malaysian, singaporean, "
    "taiwanese, australian, new zealander, jamaican, puerto rican, dominican, haitian, scandinavian, "
    "latina, latino, european, asian, african")
_CONDITIONS: Final = _words(
    "diabetes, type 1 diabetes, type 2 diabetes, asthma, celiac, celiac disease, coeliac, coeliac disease, "
    "migraine, migraines, arthritis, epilepsy, adhd, ocd, ptsd, anxiety, depression, ibs, crohn's, "
    "crohn's disease, colitis, high blood pressure, hypertension, high cholesterol, a heart condition, "
    "heart disease, insomnia, sleep apnea, psoriasis, eczema, tinnitus, fibromyalgia, lupus, "
    "multiple sclerosis, a bad back, back problems, back pain, a bad knee, bad knees, chronic pain, "
    "long covid, hypothyroidism, hyperthyroidism, scoliosis, glaucoma, cancer, endometriosis, pcos, "
    "dementia, vertigo, hay fever, dyslexia, autism, bipolar disorder, gout, osteoporosis, anemia, "
    "a pacemaker, a food allergy, a nut allergy, a peanut allergy")
_HEALTH_STATES: Final = _words(
    "lactose intolerant, gluten intolerant, fructose intolerant, diabetic, prediabetic, pre-diabetic, "
    "asthmatic, epileptic, celiac, coeliac, colorblind, color blind, colour blind, colour-blind, deaf, "
    "hard of hearing, blind, legally blind, pregnant, anemic, anaemic, immunocompromised, autistic, "
    "dyslexic, on the spectrum, a wheelchair user, in a wheelchair, type 1 diabetic, type 2 diabetic")
_DIETS: Final = _words(
    "vegetarian, vegan, pescatarian, pescetarian, flexitarian, plant-based, plant based, gluten-free, "
    "gluten free, dairy-free, dairy free, nut-free, sugar-free, keto, paleo, kosher, halal, teetotal, "
    "teetotaler, teetotaller, sober, carnivore, raw vegan")
_AVOIDED_FOODS: Final = _words(
    "meat, red meat, pork, beef, chicken, lamb, fish, seafood, shellfish, dairy, milk, cheese, eggs, "
    "gluten, wheat, sugar, alcohol, booze, beer, wine, coffee, caffeine, soda, animal products, "
    "processed food, fried food, spicy food, carbs, nuts, peanuts, soy, anything with a face")
_MARITAL: Final = _words(
    "married, engaged, divorced, separated, widowed, single, in a relationship, seeing someone, "
    "dating someone, a widow, a widower")
_NEGATIVE_THINGS: Final = _words(
    "waiting, queue, queues, queueing, queuing, standing in line, lines, traffic, sitting in traffic, "
    "being stuck, getting stuck, taxes, doing taxes, paperwork, mondays, monday mornings, delays, "
    "cancelled flights, canceled flights, being ignored, being on hold, hold music, spam, getting up at, "
    "being late, being sick, homework, jury duty, the dmv, the dentist, root canals, hangovers")
_MONTHS: Final = _words(
    "january, february, march, april, may, june, july, august, september, october, november, december, "
    "monday, tuesday, wednesday, thursday, friday, saturday, sunday")
_NOT_NAMES: Final = frozenset((*_words(
    "sorry, fine, good, great, okay, ok, back, here, home, done, ready, sure, not, so, just, still, also, "
    "really, very, tired, happy, glad, excited, bored, busy, free, lost, confused, in, on, at, from, a, "
    "an, the, going, trying, working, looking, thinking, interested, new, well, alright, fucking, "
    "currently, always, never, gonna, the one, afraid, hungry, curious, starving, stuck, late, off, "
    "human, only, moving, planning, learning, studying, retired, single, married, engaged, vegan, "
    "vegetarian, allergic, what, who, i, it, ai"), *_DEMONYMS, *_LANGUAGES, *_MONTHS))
_NAME_STOP: Final = frozenset(_words(
    "and, but, by, btw, so, from, i, i'm, im, though, lol, haha, the, a, an, actually, not, is, was, if, "
    "at, in, on, for, with, to, or, because, since, which, who, please, thanks, nice, now, here, too, "
    "also, just, anyway, everyone, ok, okay, whatever, cause, yes, no"))

_ADV: Final = (r"(?:(?:" + "|".join([
    "really", "just", "also", "still", "currently", "actually", "recently", "now", "absolutely", "totally",
    "honestly", "definitely", "genuinely", "truly", "literally", "seriously", "basically", "finally",
    "officially", "already", "even", "mostly", "usually", "generally", "always", "originally", "happily",
    "proudly", "secretly", "slowly", "kind of", "sort of", "pretty much", "kinda", "sorta", "so", "very",
    "both", "all", "too", "somehow",
    r"(?!(?:apply|reply|rely|fly|supply|comply|rally|bully|only)\b)[a-z]+ly"]) + r")\s+)*")
_SUBJ: Final = r"(?:i|we)"
_BE: Final = r"(?:i'm|i am|im|we're|we are)"
_HAVE: Final = r"(?:i've got|i have got|we've got|we have got|i've|i have|we've|we have|ive)"
_HAVE_BEEN: Final = r"(?:i've been|i have been|we've been|we have been|ive been)"
_NEG: Final = r"(?:don't|do not|dont|never|can't|cannot|cant|won't|will not|really don't|no longer)"
_FUTURE: Final = re.compile(
    r"\b(?:next (?:week|month|year|summer|winter|spring|fall|autumn|weekend|\w+day|" + "|".join(_MONTHS[:12])
    + r")|this (?:coming )?(?:week|weekend|month|year|summer|winter|spring|fall|autumn|"
    + "|".join(_MONTHS[:12]) + r")|in (?:" + "|".join(_MONTHS[:12])
    + r")|on (?:the )?\d+(?:st|nd|rd|th)?|on (?:" + "|".join(_MONTHS[12:])
    + r")|in (?:a few|a couple of|two|three|four|five|six|\d+) (?:days|weeks|months|years)"
    + r"|later this (?:week|month|year)|tomorrow|someday|one day|soon|after graduation"
    + r"|at the end of (?:the|this) (?:week|month|year|summer)|over the (?:summer|holidays|weekend)"
    + r"|for (?:christmas|thanksgiving|easter|the holidays|new year'?s|my birthday|our anniversary)"
    + r"|in (?:the )?(?:spring|summer|fall|autumn|winter)|\d{1,2}(?::\d\d)? ?(?:am|pm)|in \d{4})\b",
    re.IGNORECASE)


# -- text -----------------------------------------------------------------------------------------
_QUOTED: Final = re.compile(r"[\"“”«»][^\"“”«»\n]*[\"“”«»]|(?<![\w])'[^'\n]{2,}?'(?![\w])")
_PARENS: Final = re.compile(r"\(([^()]*)\)")
_BREAK: Final = re.compile(r"([.!?…]+)[\"')\]]*(?=\s|$)\s*|\n+")
_ABBREVIATION: Final = re.compile(r"(?:^|[\s(])(?:st|dr|mr|mrs|ms|mt|jr|sr|prof|vs|etc|approx|ave|e\.g|i\.e|"
                                  r"[A-Z])$", re.IGNORECASE)


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = re.sub("[\u2018\u2019]", "'", text)
    text = re.sub("[\u2013\u2014]", " - ", text)
    return re.sub(r"[ \t\r\f\v]+", " ", text)


def _sentences(text: str) -> list[str]:
    """The sentences of ``text``: quoted speech dropped, each parenthesis its own
    sentence, no split after an abbreviation ("St. Mary's")."""
    text = _QUOTED.sub(" ", _normalise(text))
    text = _PARENS.sub(lambda m: "\n" + m.group(1) + "\n", text)
    out = []
    start = 0
    for m in _BREAK.finditer(text):
        before = text[start:m.start()]
        if m.group(1) == "." and _ABBREVIATION.search(before):
            continue
        sentence = (before + (m.group(1) or "")).strip()
        if sentence:
            out.append(sentence)
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


_SUBJECT_START: Final = (r"(?:i|i'm|i've|i'd|i'll|im|ive|my|we|we're|we've|we'd|we'll|our|he|she|they|it|"
                         r"it's|he's|she's|they're|you|there|that's|this|people|everyone|everybody|"
                         r"nobody|most people)(?![\w'])")
_LEADING_ADVERBIAL: Final = (r"in my (?:spare|free|down) time|outside (?:of )?work|these days|nowadays|"
                             r"lately|at the moment|right now|currently|on weekends|at weekends|at home|"
                             r"at work|for fun|most days|every day|on the side")
_HARD_SPLIT: Final = re.compile(r"\s*(?:;|:(?=\s)|\s-\s|\.\.\.+)\s*")
_SOFT_SPLIT: Final = re.compile(
    rf",\s*(?:(?:and also|but also|and|but|so|plus|because|since|though|although|yet|or|as|cause|cuz)\s+)?"
    rf"(?=(?:(?:{_LEADING_ADVERBIAL}),?\s+)?{_SUBJECT_START})"
    rf"|\s+(?:and|but|so|because|since|though|although|while|whereas|plus|yet|cause|cuz|as|or)\s+"
    rf"(?={_SUBJECT_START})"
    r"|,\s*(?:so|but|because|since|though|although|whereas|yet|and so)\s+"
    r"|,?\s+(?=(?:if|unless|even if|whether|which|who|especially|except|when|whenever)(?![\w']))",
    re.IGNORECASE)
_ELIDED: Final = re.compile(
    r"\s+(?:and|but|or)\s+(?=(?:also\s+|now\s+|currently\s+|still\s+)?(?:work|live|study|love|like|enjoy|"
    r"hate|speak|teach|play|drive|own|run|grew|moved|raised|born|keep|have|am)(?![\w']))", re.IGNORECASE)
_I_SUBJECT: Final = re.compile(r"^(i|we)(?:'m|'ve|'re| am| have| are)?(?![\w'])", re.IGNORECASE)
_BE_START: Final = re.compile(rf"^{_BE}\s+", re.IGNORECASE)
_BE_SEGMENT: Final = re.compile(r",\s*(?:and\s+)?|\s+and\s+", re.IGNORECASE)
_COUPLE: Final = re.compile(
    rf"\b(?:(?:my|our)\s+(?P<rel>(?:[\w'-]+\s+)?{_alt(_RELATIVES)})(?:,?\s+(?P<name>[^\W\d_][\w'-]*),?)?"
    rf"\s+and\s+(?:i|me)|me\s+and\s+my\s+(?P<rel2>(?:[\w'-]+\s+)?{_alt(_RELATIVES)}))(?![\w'])",
    re.IGNORECASE)

_DISCOURSE: Final = re.compile(
    r"^(?:(?:hi there|hey there|hello there|hi|hey|hello|hiya|yo|oh|ah|so|well|anyway|anyways|also|and|but|"
    r"plus|btw|by the way|fyi|fun fact|quick intro|intro|honestly|actually|basically|yeah|yep|yup|yes|no|"
    r"nope|lol|haha\w*|hmm+|um+|uh+|ugh|sorry|just so you know|for context|for background|"
    r"for the record|as you know|as i said|like i said|a bit about me|about me|some background|"
    r"background|context|ok|okay|right|see|look|listen|then|because|since|cause|cuz|though|although|"
    r"i mean|to be honest|tbh|in fact|ps|p\.s\.|oh and|and also|now|again|speaking of which|"
    r"first of all|firstly|secondly|lastly|update|quick update|good news|great news|big news|news|"
    rf"guess what|oh yeah|oh btw|wait|{_LEADING_ADVERBIAL})(?![\w'])[\s,:!.-]*)+", re.IGNORECASE)
_TRAILING: Final = re.compile(
    r"(?:[\s,.!?…:;~*\"')\]-]+|\s+(?:lol|lmao|haha\w*|hehe|btw|by the way|tbh|eh|fyi|thanks|thank you|please|"
    r"nice to meet you|ha|xd|:\)|:d|;\)|<3|for now|right now|at the moment|these days|lately|"
    r"currently|originally|now|too|though|as well|anymore|honestly|no contest|hands down|for sure|by far|"
    r"of course|i guess|i think|tbh|at all|a lot|so much|ok|okay|anyway)(?![\w']))+$", re.IGNORECASE)
_CONDITIONAL_SENTENCE: Final = re.compile(
    r"^(?:if|unless|suppose|supposing|imagine|assuming|assume|what if|let's say|lets say|say|"
    r"hypothetically|in case|in the story|in my story|in the game|in this game|in the novel|in my novel|"
    r"in the book|in my dream|my character|as an ai|as a language model|as an assistant|when i was|"
    r"back when|i'd be happy|i would be happy|here (?:is|are|'s) (?:a|an|the|some|your|my|\d+|two|three|"
    r"four|five|several)\b|great question|certainly|of course|sure thing)(?![\w'])", re.IGNORECASE)
_CONDITIONAL_CLAUSE: Final = re.compile(
    r"^(?:if|unless|whether|which|who|whom|especially|except|when|whenever|even if|as if|than)(?![\w'])",
    re.IGNORECASE)
_IF_TAIL: Final = re.compile(r",?\s+(?:even if|if|unless|as long as|only if)(?![\w']).*$", re.IGNORECASE)
_HEDGE: Final = re.compile(
    r"\b(?:would|wouldn't|could|couldn't|might|wish|maybe|perhaps|possibly|hypothetically|pretend|"
    r"thinking (?:about|of)|considering|debating|not sure|unsure|wondering|wonder|i guess|supposedly|"
    r"if only|imagine|suppose|should i|may be)\b|\b(?:i|we|you|he|she|they)'d\b", re.IGNORECASE)
_QUESTION_START: Final = re.compile(
    r"^(?:do|does|did|can|could|would|will|should|shall|is|are|am|was|were|have|has|what|what's|whats|"
    r"where|where's|when|who|who's|whom|whose|why|how|how's|which|isn't|aren't|doesn't|won't|"
    r"wouldn't|shouldn't|couldn't|any|anyone|anybody)(?![\w'])", re.IGNORECASE)
_SARCASM: Final = re.compile(r"said no one ever|said nobody ever|\bnot!|/s\b|\byeah right\b", re.IGNORECASE)

_REQUEST: Final = re.compile(
    r"^(?:(?:please|pls|plz|hey|ok|okay|oh|also|and|btw|just|so)[\s,!]+)*"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?|please\s+)?"
    r"(?:remember|don'?t\s+forget|do\s+not\s+forget|never\s+forget|note|take\s+note|make\s+a\s+note|"
    r"keep\s+in\s+mind|bear\s+in\s+mind|memori[sz]e)"
    r"(?:\s+(?:this|that|for\s+later|for\s+the\s+future|for\s+next\s+time|"
    r"for\s+future\s+reference)(?=\s*[:,-]))?"
    r"(?:\s*[:,-]\s*|\s+that\s+|\s+)(?P<body>.+)$", re.IGNORECASE)
_NOT_A_BODY: Final = re.compile(
    r"^(?:to|when|how|what|where|who|why|which|me|us|it|this|that|everything|anything|whether|if|"
    r"the time|about)(?![\w'])", re.IGNORECASE)
_BODY_TAIL: Final = re.compile(r"(?:[\s,.!?]+|\s+(?:please|for me|thanks|thank you|for next time|"
                               r"going forward|from now on|ok|okay))+$", re.IGNORECASE)
_FIRST_PERSON: Final = re.compile(r"\b(?:i|i'm|i've|my|me|we|our|us)(?![\w'])", re.IGNORECASE)


def _strip_clause(clause: str) -> str:
    clause = _DISCOURSE.sub("", clause.strip())
    previous = None
    while previous != clause:
        previous = clause
        clause = _TRAILING.sub("", clause).strip()
    return clause


def _couples(sentence: str) -> tuple[str, list[_Statement]]:
    """"my wife and I ..." -> "we ...", and the statement that the user has a wife."""
    found: list[_Statement] = []

    def replace(m: re.Match[str]) -> str:
        rel = (m.group("rel") or m.group("rel2")).lower()
        found.extend(_relative_statement(rel, _name_of(m.group("name") or ""), ""))
        return "we"

    return _COUPLE.sub(replace, sentence), found


def _clauses(sentence: str) -> list[str]:
    """The clauses of a sentence, each meant to begin with its subject: split at ";",
    ":" and dashes, before a subject after a comma or conjunction, after ", so" and
    the like, and before "if", "which", "who", "especially"; an elided subject is
    restored ("I teach yoga and work at a library"); "I'm X, Y and Z" is split where
    "I'm Y" reads as a statement of its own."""
    out: list[str] = []
    for piece in _HARD_SPLIT.split(sentence):
        for raw in _SOFT_SPLIT.split(piece):
            part = _strip_clause(raw)
            subject = _I_SUBJECT.match(part)
            for i, elided in enumerate(_ELIDED.split(part) if subject else [part]):
                clause = elided
                if i and subject:  # "I was born in Seoul but raised in Vancouver": "I was raised ..."
                    passive = elided.split(" ", 1)[0].lower() in ("born", "raised")
                    aux = "was " if passive and re.match(r"(?i)^\w+\s+was\b", part) else ""
                    clause = f"{subject.group(1)} {aux}{elided}"
                out.extend(_be_segments(_strip_clause(clause)))
    return [c for c in out if c]


def _be_segments(clause: str) -> list[str]:
    """"I'm 52, recently divorced" -> "I'm 52", "I'm recently divorced": a segment after
    a comma or "and" starts a clause of its own when "I'm <segment>" is a statement
    (other than a name: "I'm going to Japan and Korea" stays whole)."""
    head = _BE_START.match(clause)
    if head is None:
        return [clause]
    prefix, rest = head.group(0), clause[head.end():]
    separators = list(_BE_SEGMENT.finditer(rest))
    if not separators:
        return [clause]
    starts = [0, *(s.end() for s in separators)]
    ends = [*(s.start() for s in separators), len(rest)]
    out = []
    begin = 0
    for i in range(1, len(starts)):
        found = _match_rules(prefix + _strip_clause(rest[starts[i]:ends[i]]))
        if found and found[0].slot != "name":
            out.append(prefix + rest[begin:ends[i - 1]])
            begin = starts[i]
    if not out:
        return [clause]
    out.append(prefix + rest[begin:])
    return [_strip_clause(c) for c in out]


# -- third person and back ------------------------------------------------------------------------
_MODALS: Final = frozenset(_words(
    "can, can't, cannot, could, couldn't, will, won't, would, wouldn't, should, shouldn't, must, may, "
    "might, shall, 'll, used"))
_PAST: Final = frozenset(_words(
    "went, got, grew, was, were, had, made, took, left, began, ran, won, bought, broke, became, came, met, "
    "saw, found, lost, set, put, quit, taught, thought, told, said, sold, spent, drove, rode, wrote, "
    "built, knew, felt, kept, gave, fell, flew, held, led, paid, sent, slept, spoke, stood, swam, "
    "understood, wore, woke, ate, drank, did, heard, hurt, cut, let, hit, forgot, chose, caught, brought, "
    "fought, began, been, born, gone, done, seen"))
_CONJUGATED: Final = {"am": "is", "are": "is", "have": "has", "do": "does", "don't": "doesn't",
                      "dont": "doesn't", "haven't": "hasn't", "go": "goes", "were": "was", "aren't": "isn't",
                      "'m": "is"}
_BASE: Final = {v: k for k, v in _CONJUGATED.items() if k not in ("are", "dont", "'m", "were", "aren't")}
_ADV_WORDS: Final = frozenset(_words(
    "really, just, also, still, currently, actually, recently, now, absolutely, totally, honestly, "
    "definitely, genuinely, truly, literally, seriously, basically, finally, officially, already, even, "
    "mostly, usually, generally, always, originally, happily, proudly, secretly, slowly, kinda, sorta, "
    "so, very, both, all, too, somehow, never, often, sometimes, rarely, occasionally, mainly, only"))
_SUBJECT_FORMS: Final = (
    (re.compile(r"^(?:i'm|i am|im|we're|we are)(?![\w'])", re.I), "The user is"),
    (re.compile(r"^(?:i've|ive|i have|we've|we have)(?![\w'])", re.I), "The user has"),
    (re.compile(r"^(?:i was|we were)(?![\w'])", re.I), "The user was"),
    (re.compile(r"^(?:i'll|i will|we'll|we will)(?![\w'])", re.I), "The user will"),
    (re.compile(r"^(?:i'd|we'd)(?![\w'])", re.I), "The user would"),
)
_I_VERB: Final = re.compile(rf"^(?:i|we)\s+({_ADV})([\w'-]+)", re.I)
_MY_START: Final = re.compile(r"^(?:my|our)(?![\w'])", re.I)
_PRONOUNS_USER: Final = {"my": "their", "our": "their", "me": "them", "us": "them", "myself": "themselves",
                         "ourselves": "themselves", "mine": "theirs", "ours": "theirs", "i'm": "they're",
                         "i've": "they've", "i'd": "they'd", "i'll": "they'll", "i": "they", "we": "they",
                         "we're": "they're", "we've": "they've"}
_PRONOUNS_OTHER: Final = {"my": "the user's", "our": "the user's", "me": "the user", "us": "the user",
                          "myself": "the user", "mine": "the user's", "i'm": "the user is",
                          "i've": "the user has", "i": "the user", "we": "the user"}
_PRONOUN: Final = re.compile(r"(?<![\w'])(?:i'm|i've|i'd|i'll|we're|we've|my|our|me|us|myself|ourselves|mine|"
                             r"ours|i|we)(?![\w'])", re.I)


def _conjugate(verb: str) -> str:
    lower = verb.lower()
    if lower in _CONJUGATED:
        return _CONJUGATED[lower]
    if lower in _MODALS or lower in _PAST or lower.endswith(("ed", "n't")):
        return verb
    if re.search(r"[^aeiou]y$", lower):
        return verb[:-1] + "ies"
    if re.search(r"(?:ch|sh|ss|x|z|o)$", lower):
        return verb + "es"
    return verb + "s"


def _base(verb: str) -> str:
    lower = verb.lower()
    if lower in _BASE:
        return _BASE[lower]
    if lower in ("is", "'s"):
        return "am"
    if lower in _MODALS or lower in _PAST or lower.endswith(("ed", "n't")):
        return verb
    if len(lower) > 4 and lower.endswith("ies"):
        return verb[:-3] + "y"
    if re.search(r"(?:ches|shes|sses|xes|zes|oes)$", lower):
        return verb[:-2]
    if lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
        return verb[:-1]
    return verb


def _third_person(clause: str) -> str:
    """A first-person clause as a third-person sentence: "I just moved to Berlin with
    my wife" -> "The user just moved to Berlin with their wife."."""
    text = clause.strip().rstrip(" ,.;:!?")
    head = ""
    for pattern, replacement in _SUBJECT_FORMS:
        m = pattern.match(text)
        if m:
            head, text = replacement, text[m.end():]
            break
    else:
        m = _I_VERB.match(text)
        if m is not None:
            head, text = "The user " + m.group(1) + _conjugate(m.group(2)), text[m.end():]
        elif (my := _MY_START.match(text)) is not None:
            head, text = "The user's", text[my.end():]
    table = _PRONOUNS_USER if head else _PRONOUNS_OTHER
    text = _PRONOUN.sub(lambda p: table.get(p.group(0).lower(), p.group(0)), text)
    sentence = (head + text) if head else text
    sentence = sentence[:1].upper() + sentence[1:]
    return sentence + "."


_THIRD_SUBJECT: Final = re.compile(r"^(?:the user|user)(?P<poss>'s)?(?![\w'])", re.I)
_LEADING_MARK: Final = re.compile(r"^(?:\[\d+\]|\d+[.)]|[-*•])\s*")
_THIRD_REST: Final = re.compile(r"(?<![\w'])(?:the user's|the user|their|theirs|themselves)(?![\w'])", re.I)
_FIRST_OF: Final = {"the user's": "my", "the user": "me", "their": "my", "theirs": "mine",
                    "themselves": "myself"}
_ELLIPTIC_VERBS: Final = frozenset(_words(
    "lives, works, likes, loves, enjoys, prefers, hates, dislikes, speaks, studies, has, is, owns, drives, "
    "grew, moved, was, plans, teaches, plays, goes, keeps, runs"))


def _first_person(sentence: str, names: Sequence[str] = ()) -> str:
    """A sentence about the user read as if the user said it: "The user lives in
    Lisbon." -> "I live in Lisbon" (also "User ...", "<the user's name> ...", and a
    sentence without its subject, "Lives in Lisbon")."""
    text = _LEADING_MARK.sub("", sentence.strip()).rstrip(" .!")
    subject = _THIRD_SUBJECT.match(text)
    possessive = bool(subject and subject.group("poss"))
    if subject is None:
        for name in names:
            if name and text.startswith(name) and re.match(r"(?:'s)?(?![\w'])", text[len(name):]):
                possessive = text[len(name):].startswith("'s")
                subject = re.match(re.escape(name) + ("'s" if possessive else ""), text)
                break
    if subject is not None:
        rest = text[subject.end():]
        if possessive:
            text = "my" + rest
        else:
            words = rest.split()
            adverbs = []
            while words and words[0].lower() in _ADV_WORDS:
                adverbs.append(words.pop(0))
            verb = _base(words.pop(0)) if words else ""
            text = " ".join(["I", *adverbs, verb, *words])
    elif text.split(" ", 1)[0].lower() in _ELLIPTIC_VERBS:
        first, _, rest = text.partition(" ")
        text = f"I {_base(first.lower())} {rest}"
    return _THIRD_REST.sub(lambda m: _FIRST_OF[m.group(0).lower()], text)


# -- rules ----------------------------------------------------------------------------------------
_STOP_COMMON: Final = re.compile(
    r"\s+(?:because|cause|cuz|since|but|so|though|although|which|who|whom|where|while|whereas|unless|until|"
    r"lol|lmao|haha\w*|btw|tbh|anyway|anyways|even though|as long as|if|except|that)(?![\w'])|\s*[;(]|\s-\s",
    re.IGNORECASE)
_STOP_PLACE: Final = re.compile(
    r"\s+(?:with|for|now|these days|at the moment|right now|currently|last|this|next|a few|a couple|about|"
    r"around|ago|from|to|and|originally|full[- ]time|part[- ]time|lately|too|as well|as|in \d{4}|"
    r"since|when|where|after|before|i)(?![\w'])", re.IGNORECASE)
_STOP_THING: Final = re.compile(
    r"\s+(?:especially|more than|rather than|at all|a lot|so much|lately|these days|nowadays|too|as well|"
    r"anymore|any more|right now)(?![\w'])", re.IGNORECASE)
_STOP_JOB: Final = re.compile(
    r"\s+(?:for (?:about |almost |nearly |over |around |the (?:past|last) )?(?:\d+|a|an|one|two|three|four|"
    r"five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|several|many|a few|a couple of|"
    r"a couple) (?:years?|months?|weeks?|decades?)|now|these days|currently|at the moment|right now|"
    r"lately|too)(?![\w'])", re.IGNORECASE)
_STOP_PLAN: Final = re.compile(r"\s+(?:with|and i|and we)(?![\w'])", re.IGNORECASE)
_STOP_NONE: Final = re.compile(r"(?!x)x")
_VERBISH: Final = re.compile(
    r"\b(?:is|are|was|were|am|be|been|being|have|has|had|do|does|did|can|could|will|would|should|it|i|"
    r"i'm|you|he|she|they|we|this|that|these|those|there|makes?|tastes?|gets?|goes?|feels?|looks?|keeps?|"
    r"came|come|comes|said|says|spent|spend|mostly|probably|especially|just|not|no|which|so|but|because|"
    r"eh|came|it's|that's)\b", re.IGNORECASE)


def _comma_cut(text: str) -> str:
    """``text`` up to its first comma that does not continue a list ("hiking, camping
    and fishing" stays whole; "Korean food, kimchi is my comfort meal" stops)."""
    for m in re.finditer(r",", text):
        tail = text[m.end():]
        if _VERBISH.search(tail) or len(tail.split()) > 8:
            return text[:m.start()]
    return text


def _cut(value: str, stop: re.Pattern[str]) -> str:
    for pattern in (stop, _STOP_COMMON):
        m = pattern.search(value)
        if m:
            value = value[:m.start()]
    value = _comma_cut(value)
    previous = None
    while previous != value:
        previous = value
        value = _TRAILING.sub("", value)
    return value


def _first_word(text: str) -> str:
    m = re.match(r"[\w'-]+", text)
    return m.group(0).lower() if m else ""


def _singular(word: str) -> str:
    word = word.lower()
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def _contains_any(text: str, lexicon: Iterable[str]) -> str | None:
    """The first entry of ``lexicon`` (a word or phrase) in ``text``, singular or plural."""
    lowered = " " + re.sub(r"[^\w'-]+", " ", text.lower()) + " "
    singular = " " + " ".join(_singular(w) for w in lowered.split()) + " "
    for entry in lexicon:
        if f" {entry} " in lowered or f" {entry} " in singular:
            return entry
    return None


_OBJECT_PRONOUNS: Final = re.compile(
    r"^(?:it|it's|that|this|these|those|you|him|her|them|what|how|when|where|why|whatever|everything|"
    r"nothing|anything|something|your|his|one|which|there|here|the idea|the fact|the way|such|"
    r"to (?:think|say|imagine|believe|pretend|admit|hear|know|see you|help|ask))(?![\w'])", re.I)


def _is_thing(value: str, clause: str) -> bool:
    if _OBJECT_PRONOUNS.match(value) or len(value.split()) > 12:
        return False
    if _contains_any(value, _NEGATIVE_THINGS) and re.match(r"(?i)^\W*(?:i|we)\s+(?:\w+\s+)?(?:love|adore|"
                                                            r"enjoy|like)", clause):
        return False
    return not re.match(rf"(?i)^(?:my|our)\s+(?:[\w'-]+\s+)?{_alt(_RELATIVES)}", value)


def _is_place(value: str, clause: str) -> bool:
    if not value or len(value.split()) > 8 or _OBJECT_PRONOUNS.match(value):
        return False
    return not re.match(r"(?i)^(?:fear|hope|denial|the moment|the past|a bubble|peace|harmony|sin)\b", value)


def _is_proper_place(value: str, clause: str) -> bool:
    """A place named with a capital (or any place when the writer uses no capitals)."""
    if not _is_place(value, clause):
        return False
    found: list[str] = re.findall(r"[^\W\d_][\w'.-]*", value)
    words = [w for w in found if w.lower() not in ("the", "a", "an")]
    if not words or words[0].lower() in _MONTHS:
        return False
    if not any(ch.isupper() for ch in clause):
        return len(words) <= 3
    return any(w[0].isupper() for w in words)


def _is_language(value: str, clause: str) -> bool:
    return _contains_any(value, _LANGUAGES) is not None


def _is_future(value: str, clause: str) -> bool:
    return _FUTURE.search(clause) is not None


def _is_short(value: str, clause: str) -> bool:
    return 0 < len(value.split()) <= 8 and not _OBJECT_PRONOUNS.match(value)


_Reader = Callable[["_Rule", re.Match[str], str], list[_Statement]]
_Check = Callable[[str, str], bool]


@dataclass(frozen=True, slots=True)
class _Rule:
    """One pattern: ``pattern`` matched at the start of a clause; ``read`` turns the
    match into statements (by default the ``v`` group, cut at ``stop`` and accepted by
    ``check``, with the clause up to the value's end, in the third person, as the
    content). ``key``: the aspect of the slot the statement fills."""

    slot: str
    pattern: re.Pattern[str]
    read: _Reader
    stop: re.Pattern[str] = _STOP_NONE
    check: _Check | None = None
    key: str = ""


def _read_value(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    start = m.start("v")
    value = _cut(m.group("v"), rule.stop)
    if not value.strip() or (rule.check is not None and not rule.check(value, clause)):
        return []
    return [_Statement(rule.slot, value, _third_person(clause[:start + len(value)]), rule.key or rule.slot)]


def _name_of(text: str, *, capitalised: bool = True) -> str:
    """The name at the start of ``text``: up to three words, stopping at a function
    word, a comma, or (when the first is capitalised) a lower-case word."""
    words: list[str] = []
    for token in text.split():
        word = token.strip(".,!?;:\"()").removesuffix("'s")
        if not word or not (word[0].isalpha()) or word.lower() in _NAME_STOP:
            break
        if (capitalised or (words and words[0][0].isupper())) and not word[0].isupper():
            break
        words.append(word)
        if len(words) == 3 or token.endswith((",", ".", "!", "?", ";", "'s")):
            break
    return " ".join(words)


def _read_name(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """"my name is tomás", "call me Bex": the name as written (a nickname when the
    rule's key says so)."""
    name = _name_of(m.group("v"), capitalised=False)
    if not name or name.split()[0].lower() in _NOT_NAMES:
        return []
    if rule.key == "nickname" and not name[0].isupper() and any(ch.isupper() for ch in clause):
        return []  # "you can call me anytime"
    if rule.key == "nickname":
        return [_Statement("name", name, f"The user goes by {name}.", "nickname")]
    return [_Statement("name", name, f"The user's name is {name}.", "name")]


def _read_introduction(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """"I'm Priya": only a whole clause of capitalised words that are no adjective,
    nationality or language ("I'm Fine", "I'm Canadian" are not names)."""
    name = _name_of(m.group("v"))
    if name != _cut(m.group("v"), _STOP_NONE) or any(w.lower() in _NOT_NAMES for w in name.split()):
        return []
    return _read_name(rule, m, clause)


def _read_age(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    age = m.group("v")
    if age.isdigit() and not 1 <= int(age) <= 120:
        return []
    return [_Statement("age", age, f"The user is {age} years old.", "age")]


def _job_head(value: str, lexicon: Sequence[str]) -> str | None:
    head = re.split(r"(?i)\s+(?:at|for|in|with|on|from|who|that|which|and|but|than|of|by)\s+|,", value,
                    maxsplit=1)[0]
    if re.search(r"(?i)\b(?:fan|lover|person|believer|her|his|their|your|my|our|big|huge|bit|kind|sort|"
                 r"type|mess|fool|sucker)\b", head):
        return None
    return _contains_any(head, lexicon)


def _read_job(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """"I'm a (high school chemistry) teacher (at ...)": a job title the lexicon knows."""
    return _read_work(m, clause, _JOBS)


def _read_business(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """"I run a small bakery": a business, not "I run marathons"."""
    return _read_work(m, clause, _BUSINESSES)


def _read_work(m: re.Match[str], clause: str, lexicon: Sequence[str]) -> list[_Statement]:
    value = _cut(m.group("v"), _STOP_JOB)
    if not value or _job_head(value, lexicon) is None:
        return []
    return [_Statement("work", value, _third_person(clause[:m.start("v") + len(value)]), "work")]


_REPORTING: Final = re.compile(
    r"^(?:said|says|told|tells|thinks|thought|believes|reckons|claims|claimed|mentioned|asked|asks|"
    r"suggested|suggests|wants me|wanted me|insists|swears|swore|keeps telling|always says|once said)"
    r"(?![\w'])", re.I)


def _relative_statement(rel: str, name: str, rest: str) -> list[_Statement]:
    rel = " ".join(rel.split())
    head = _contains_any(rel, _RELATIVES) or rel
    plural = rel.split()[-1].lower() in _PLURAL_RELATIVES
    if _REPORTING.match(rest):
        rest = ""
        if not name:
            return []
    if not name and head in _OTHERS and head != "ex":  # "my ex lives in Paris" is about the user's life
        return []
    article = "" if plural or re.match(rf"(?i)^(?:{_COUNT})\s", rel) else (
        "an " if rel[:1].lower() in "aeiou" else "a ")
    if rest:  # "my brother lives in Porto", "my wife Anna's sister ..."
        subject = f"my {rel} {name}".rstrip()
        content = _third_person(subject + ("" if rest.startswith("'") else " ") + rest)
    elif name:
        content = f"The user's {rel} is named {name}."
    else:
        content = f"The user has {article}{rel}."
    return [_Statement("relationship", name or rel, content, "relationship")]


def _pet_statement(kind: str, name: str, rest: str) -> list[_Statement]:
    kind = " ".join(kind.split())
    plural = kind.endswith("s") and not kind.endswith("ss")
    article = "" if plural or re.match(rf"(?i)^(?:{_COUNT})\s", kind) else (
        "an " if kind[:1].lower() in "aeiou" else "a ")
    if name:
        content = f"The user has {article}{kind} named {name}."
    elif rest:
        content = _third_person(f"my {kind} {rest}")
    else:
        content = f"The user has {article}{kind}."
    return [_Statement("pet", name or kind, content, "pet")]


def _split_name(after: str) -> tuple[str, str]:
    after = after.lstrip(" ,")
    name = _name_of(after)
    if name and name.lower() not in _NOT_NAMES:
        return name, after[len(name):].lstrip(" ,")
    return "", after


def _read_relative(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    name, rest = _split_name(m.group("after"))
    rest = _cut(rest, _STOP_NONE) if rest else ""
    first = _first_word(rest)
    if rest and not rest.startswith("'s ") and (
            first in ("and", "or", "but", "i", "you", "so", "because", "of", "to", "for", "in", "at", "on",
                      "with", "from", "who", "that") or not rest[0].islower()):
        return []
    return _relative_statement(m.group("rel"), name, rest)


def _read_pet(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    name, rest = _split_name(m.group("after"))
    if rest and (not rest[0].islower() or _first_word(rest) in ("and", "or", "i", "you")):
        rest = ""
    return _pet_statement(m.group("kind"), name, _cut(rest, _STOP_NONE))


def _read_named(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    name = _name_of(m.group("v"), capitalised=False)
    if not name:
        return []
    if rule.slot == "pet":
        return _pet_statement(m.group("rel"), name, "")
    content = _third_person(clause[:m.start("v") + len(name)])
    return [_Statement("relationship", name, content, "relationship")]


_ITEM_START: Final = re.compile(rf"(?:^|,\s*(?:and\s+)?|\s+and\s+)(?=(?:{_COUNT})\s)", re.I)


def _read_have(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """"I have two kids, Leo and Maya, and a dog named Rex": one statement per item that
    names a relative, a pet or a possession."""
    text = _cut(m.group("v"), re.compile(r"\s+(?:who|which|that|because|but|so)\b", re.I))
    bounds = [(s.start(), s.end()) for s in _ITEM_START.finditer(text)]
    if not bounds or bounds[0] != (0, 0):
        if not _BARE_PLURAL.match(text):  # "I have grandparents in Manila" has no count
            return []
        bounds.insert(0, (0, 0))
    out: list[_Statement] = []
    for (_, begin), (end, _) in zip(bounds, [*bounds[1:], (len(text), len(text))], strict=True):
        item = text[begin:end].strip(" ,")
        head = re.split(r"(?i)\s+(?:named|called)\s+|,", item, maxsplit=1)[0]
        named = re.search(r"(?i)\s(?:named|called)\s+(.+)$", item)
        names = named.group(1) if named else (item.split(",", 1)[1].strip() if "," in item else "")
        if _contains_any(head, _PETS):
            slot = "pet"
        elif _contains_any(head, _RELATIVES):
            slot = "relationship"
        elif _contains_any(head, _POSSESSIONS):
            slot = "possession"
        else:
            continue
        content = _third_person(f"I have {item}")
        out.append(_Statement(slot, names or head, content, slot))
    return out


def _read_favourite(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    value = m.group("v").strip()
    if not _is_short(value, clause):
        return []
    return [_Statement(rule.slot, value, _third_person(_cut(clause, _STOP_NONE)), rule.slot)]


def _read_whole(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """The whole clause (cut at ``stop``) as the statement, when ``check`` accepts it."""
    whole = _cut(clause, rule.stop)
    if rule.check is not None and not rule.check(m.group("v"), whole):
        return []
    content = _third_person(whole)
    return [_Statement(rule.slot, m.group("v"), content, rule.key or rule.slot)]


def _read_occasion(rule: _Rule, m: re.Match[str], clause: str) -> list[_Statement]:
    """"The wedding is next June" said by the user: their wedding."""
    whole = _cut(re.sub(r"(?i)^the\s+", "my ", clause), rule.stop)
    if not _is_future(whole, whole):
        return []
    return [_Statement(rule.slot, m.group("v"), _third_person(whole), rule.slot)]


def _embedded(clause: str, found: list[_Statement]) -> list[_Statement]:
    """Relatives and pets mentioned inside a clause about something else ("I live with my
    grandma in Cebu", "... with my partner Fiona and our two cats"): family and pets
    always, anyone else only by name, parents only by name."""
    out: list[_Statement] = []
    seen = " ".join(s.content.lower() for s in found if s.slot in ("relationship", "pet"))
    for m in _EMBEDDED.finditer(clause):
        if m.start() == 0:
            continue
        np = " ".join(m.group("np").split())
        rel = (m.group("rel") or "").lower()
        raw_name = m.group("name") or ""
        name = raw_name if raw_name[:1].isupper() and raw_name.lower() not in _NOT_NAMES | _NAME_STOP else ""
        if rel and (rel in seen or (name and name.lower() in seen)):
            continue
        if rel in _UNBORN and _EXPECTING.search(clause):  # "we're expecting our first baby": not yet
            continue
        if _contains_any(rel, _PETS):
            out.extend(_pet_statement(np, name, ""))
        elif rel in _PARENTS or rel in _OTHERS or rel in ("best friend", "bestie"):
            if name:
                out.extend(_relative_statement(np, name, ""))
        else:
            out.extend(_relative_statement(np, name, ""))
        seen += " " + np.lower() + " " + name.lower()
    return out


_UNBORN: Final = frozenset(("baby", "babies", "twins"))
_EXPECTING: Final = re.compile(r"(?i)\b(?:expecting|having|due|pregnant|trying for)\b")
_REL: Final = _alt(_RELATIVES)
_PET: Final = _alt(_PETS)
_BARE_PLURAL: Final = re.compile(rf"^(?!(?:no|not|any|zero)\b)(?:[\w'-]+\s+)?{_alt(_PLURAL_RELATIVES)}", re.I)
_EMBEDDED: Final = re.compile(
    rf"(?:\b(?:my|our)\s+|\bwith\s+(?=(?:{_COUNT})\s))(?P<np>(?:(?:{_COUNT})\s+)?(?:[\w'-]+\s+){{0,2}}?"
    rf"(?P<rel>{_REL}|{_PET}))(?:'s?)?(?:,?\s+(?:named\s+|called\s+)?(?P<name>[^\W\d_][\w'-]*))?", re.I)


def _rule(slot: str, pattern: str, read: _Reader = _read_value, *, stop: re.Pattern[str] = _STOP_NONE,
          check: _Check | None = None, key: str = "") -> _Rule:
    return _Rule(slot, re.compile(pattern, re.IGNORECASE), read, stop, check, key)


# a clause's subject as the rules expect it, with any adverbs after it
_I: Final = rf"^{_SUBJ}\s+{_ADV}"
_IM: Final = rf"^{_BE}\s+{_ADV}"
_IHAVE: Final = rf"^{_HAVE}\s+{_ADV}"
_IVE_BEEN: Final = rf"^{_HAVE_BEEN}\s+{_ADV}"
_MY: Final = r"^(?:my|our)\s+"
_NOT_A_SUBJECT: Final = (r"(?:the|this|that|these|those|it|my|your|his|her|their|our|for|hard|now|tonight|"
                         r"today|all|every|up|on|a lot|late)(?![\w'])")
_REST: Final = r"(?P<v>.+)$"
_A_FEW: Final = r"(?:[\w'-]+\s+){0,2}?"
_FULL_TIME: Final = r"(?:(?:full[- ]time|part[- ]time|remotely|from home|nights|days|freelance|weekends)\s+)*"


def _avoided_food(value: str, clause: str) -> bool:
    return _contains_any(value, _AVOIDED_FOODS) is not None


def _names_a_school(value: str, clause: str) -> bool:
    return re.search(r"(?i)\b(?:university|college|school|institute|academy|polytechnic|uni)\b",
                     value) is not None


def _is_pastime(value: str, clause: str) -> bool:
    """"I play bass", "I collect vinyl", "I go hiking" (not "I go home", "I play it safe")."""
    if not _is_thing(value, clause) or re.match(r"(?i)^(?:to|back|home|out|for|with|along|it|the game)\b",
                                                 value):
        return False
    return re.match(r"(?i)^\w+\s+go\b", clause) is None or re.match(r"^\w+ing\b", value) is not None


def _is_vehicle(value: str, clause: str) -> bool:
    """"I drive a 2012 Subaru", "I own a condo" (not "I drive my kids to school")."""
    thing = value.split(None, 1)[-1]
    return _is_short(value, clause) and not _OBJECT_PRONOUNS.match(thing) and \
        _contains_any(thing, _RELATIVES) is None and _contains_any(thing, _PETS) is None


def _is_owned(value: str, clause: str) -> bool:
    thing = re.split(r"(?i)\s(?:in|at|for|from|last|this)\s", value)[0]
    return _contains_any(thing, _POSSESSIONS) is not None


def _is_here(value: str, clause: str) -> bool:
    """"We're in Phoenix": a capitalised place, not a visit ("I'm in Rome this week")."""
    return (_is_proper_place(value, clause)
            and value.split(None, 1)[0].lower() not in {"the", "a", "an", "my", "love", "trouble", "bed"}
            and not _FUTURE.search(clause)
            and re.search(r"(?i)\b(?:this week|today|for the|right now|at the)\b", clause) is None)


_RULES: Final[tuple[_Rule, ...]] = (
    # diet and dislikes first: they begin with a negation that every other rule refuses
    _rule("diet", rf"{_I}{_NEG}\s+(?:eat|drink|touch|consume)\s+(?:any\s+)?{_REST}",
          stop=_STOP_THING, check=_avoided_food),
    _rule("diet", rf"{_I}(?:stopped|quit|gave up|cut out)\s+(?:eating\s+|drinking\s+)?{_REST}",
          stop=_STOP_THING, check=_avoided_food),
    _rule("dislikes", rf"{_I}(?:don't|do not|dont|really don't|can't|cannot|cant)\s+"
                      rf"(?:really\s+|much\s+|particularly\s+|actually\s+)?"
                      rf"(?:like|enjoy|care for|love|stand|bear|tolerate|handle|stomach)\s+{_REST}",
          stop=_STOP_THING, check=_is_thing),
    _rule("dislikes", rf"{_I}(?:hate|dislike|detest|loathe|despise|abhor)\s+{_REST}",
          stop=_STOP_THING, check=_is_thing),
    _rule("dislikes", rf"{_IM}not\s+(?:really\s+|much of\s+|very\s+|that\s+|too\s+|all that\s+)?"
                      rf"(?:a\s+(?:big\s+|huge\s+|massive\s+)?fan of|into|keen on|big on|fond of|crazy about)"
                      rf"\s+{_REST}",
          stop=_STOP_THING, check=_is_thing),
    _rule("dislikes", r"^(?P<v>[\w' -]+?)\s+(?:is|are)(?:n't|\s+not)\s+(?:really\s+)?my\s+"
                      r"(?:thing|cup of tea|jam|scene)$",
          _read_favourite),
    # health
    _rule("health", rf"{_IM}(?:deathly\s+|a bit\s+|a little\s+)?allergic\s+to\s+{_REST}", stop=_STOP_THING),
    _rule("health", rf"{_IHAVE}(?:an?\s+)?(?:severe\s+|mild\s+|bad\s+|serious\s+|life-threatening\s+)?"
                    rf"(?P<v>[\w' -]+?)\s+allerg(?:y|ies)(?![\w'])", _read_whole),
    _rule("health", rf"{_IM}(?P<v>{_alt(_HEALTH_STATES)}|intolerant\s+to\s+.+)"),
    _rule("health", rf"{_IHAVE}(?P<v>(?:(?:mild|severe|chronic|bad|terrible|occasional|really bad)\s+)*"
                    rf"{_alt(_CONDITIONS)})"),
    _rule("health", rf"{_I}(?:was|were|got|have been|'ve been)\s+(?:recently\s+|just\s+)?diagnosed\s+with\s+"
                    rf"{_REST}"),
    _rule("health", rf"{_I}(?:suffer|struggle|live)\s+(?:from|with)\s+(?P<v>{_alt(_CONDITIONS)})"),
    # diet
    _rule("diet", rf"(?:{_IM}|{_IVE_BEEN})(?:an?\s+)?(?:strict\s+|full\s+|total\s+|lifelong\s+|100%\s+)?"
                  rf"(?P<v>{_alt(_DIETS)}|on\s+(?:an?\s+|the\s+)?[\w -]*?diet)"
                  r"(?=$|[,.;!]|\s+(?:and|but|so|for|since|because|now|too|though|these days|at the moment|"
                  r"mostly|most of the time|anyway|lol|btw|by the way|haha|myself|as well|except|,))"),
    _rule("diet", rf"{_I}(?:eat|keep|follow|stick to)\s+(?:an?\s+)?(?:strictly\s+|mostly\s+)?"
                  rf"(?P<v>{_alt(_DIETS)}|low[- ]carb|low[- ]fodmap|mediterranean|[\w-]+\s+diet)"),
    # languages
    _rule("language", rf"{_I}(?:speak|can speak|know|understand|grew up speaking|use)\s+{_REST}",
          check=_is_language),
    _rule("language", rf"{_IM}(?:fluent|conversational|proficient|bilingual|trilingual|native|decent)\s+in\s+"
                      rf"{_REST}",
          check=_is_language),
    _rule("language", rf"{_IM}(?:an?\s+)?(?:native|fluent)\s+(?P<v>[\w-]+)(?:\s+speaker)?",
          check=_is_language),
    _rule("language", rf"{_MY}(?:native|first|mother|home|main)\s+(?:language|tongue)\s+is\s+{_REST}",
          check=_is_language),
    _rule("language", rf"{_IM}(?:learning|studying|taking|practicing|practising|brushing up on|picking up)\s+"
                      rf"(?:some\s+|a bit of\s+|a little\s+)?{_REST}",
          check=_is_language),
    # plans that read like studies ("I'm studying for the bar exam")
    _rule("plan", rf"{_IM}(?:planning|plotting|hoping|aiming|intending|preparing|training|saving(?:\s+up)?|"
                  rf"studying)\s+(?:to|on|for)\s+{_REST}",
          stop=_STOP_PLAN),
    # education
    _rule("education", rf"{_IM}(?:studying(?!\s+{_NOT_A_SUBJECT})|majoring in|minoring in|enrolled (?:in|at)|"
                       r"in\s+(?:my\s+)?(?:first|second|third|fourth|final|last|senior|junior|1st|2nd|3rd|4th)\s+"
                       rf"year\s+(?:of|at|in))\s+{_REST}"),
    _rule("education", rf"{_IM}(?:finishing|completing|doing|pursuing|working on|starting)\s+"
                       r"(?:an?\s+|my\s+|the\s+)?(?P<v>[\w' .-]*?(?:degree|phd|ph\.d\.?|doctorate|master'?s|"
                       r"masters|bachelor'?s|mba|diploma|apprenticeship)(?![\w']).*)$"),
    _rule("education", rf"{_I}(?:study|major in|studied|majored in)\s+(?!{_NOT_A_SUBJECT}){_REST}",
          check=lambda v, c: not _is_language(v, c) or len(v.split()) > 2),
    _rule("education", rf"{_IM}(?:an?\s+)?(?P<v>(?:[\w'-]+\s+){{0,4}}?(?:student|freshman|sophomore|"
                       r"undergrad|undergraduate|grad student|graduate student|postgrad|phd candidate|"
                       r"doctoral candidate)"
                       r"(?![\w']).*)$"),
    _rule("education", rf"{_I}graduated\s+(?P<v>(?:from|with)\s+.+)$"),
    _rule("education", rf"{_IHAVE}(?:an?\s+)?(?P<v>(?:[\w'-]+\s+)*?(?:degree|phd|doctorate|master'?s|masters|"
                       r"bachelor'?s|mba|diploma)(?![\w']).*)$"),
    _rule("education", rf"{_I}(?:went to|attended|go to|attend)\s+{_REST}", check=_names_a_school),
    # likes
    _rule("likes", rf"{_IM}(?:into|obsessed with|passionate about|crazy about|mad about|nuts about|"
                   r"addicted to|hooked on|a\s+(?:big\s+|huge\s+|massive\s+|die-hard\s+|diehard\s+|"
                   rf"lifelong\s+|total\s+|devoted\s+|keen\s+)?(?:fan|supporter)\s+of)\s+{_REST}",
          stop=_STOP_THING, check=_is_thing),
    _rule("likes", rf"{_IM}(?:an?\s+)(?:(?:big|huge|massive|die-hard|diehard|lifelong|total|devoted|keen|"
                   r"avid|passionate|true|proud)\s+)*(?P<v>[\w' -]+?)\s+(?:fan|supporter|lover|enthusiast|"
                   r"nerd|geek|buff|fanatic|junkie|addict|aficionado|connoisseur)s?(?![\w'])",
          _read_whole, check=_is_thing),
    _rule("likes", rf"{_MY}(?:absolute\s+|all-time\s+|all time\s+|current\s+|new\s+)?favou?rite\s+"
                   rf"[\w' -]+?\s+(?:is|are|has to be|has always been)\s+{_REST}",
          check=_is_short),
    _rule("likes", r"^(?P<v>[\w' -]+?)\s+(?:is|are)\s+(?:definitely\s+)?my\s+(?:absolute\s+|all-time\s+)?"
                   r"(?:favou?rite|comfort)(?:\s+[\w -]+)?$",
          _read_favourite),
    _rule("likes", r"^(?P<v>[\w' -]+?)\s+(?:is|are)\s+(?:totally\s+|definitely\s+)?my\s+(?:thing|jam)$",
          _read_favourite),
    _rule("likes", rf"{_I}(?:like|love|enjoy|adore|prefer|dig|relish|cherish|can't get enough of)\s+{_REST}",
          stop=_STOP_THING, check=_is_thing),
    _rule("likes", rf"{_I}(?:take|drink|have|like)\s+my\s+(?P<v>(?:coffee|tea|steak|eggs|burgers?|martinis?|"
                   r"whisky|whiskey)\s+.+)$",
          stop=_STOP_THING),
    _rule("likes", rf"{_I}(?:play|collect|go)\s+{_REST}", stop=_STOP_THING, check=_is_pastime),
    # relationships: status
    _rule("relationship", rf"{_IM}(?P<v>{_alt(_MARITAL)}(?:\s+to\s+.+)?)"
                          r"(?=$|\s+(?:to|for|since|now|and)\b|[,!.])"),
    _rule("relationship", rf"{_IM}(?:an?\s+)?(?:proud\s+|new\s+|single\s+|first-time\s+|busy\s+|working\s+)?"
                          r"(?P<v>(?:mom|mum|mother|dad|father|parent|grandma|grandmother|grandpa|grandfather|"
                          r"grandparent|stepmom|stepdad|aunt|auntie|uncle)(?:\s+of\s+.+)?)$"),
    # work
    _rule("work", rf"{_IM}in\s+(?P<v>{_alt(_FIELDS)}.*)$", stop=_STOP_JOB),
    _rule("work", rf"{_IM}(?P<v>retired|unemployed|self-employed|between jobs|out of work|a freelancer|"
                  r"freelance|freelancing|a stay-at-home (?:mom|mum|dad|parent)|"
                  r"on (?:maternity|paternity|parental) leave|job hunting)(?![\w'])",
          stop=_STOP_JOB),
    _rule("work", rf"{_I}(?:started|got|landed|accepted|took|began)\s+(?:an?\s+|my\s+|the\s+)?"
                  r"(?:new\s+|first\s+|dream\s+)?(?:job|position|role|gig|internship|post)\s+"
                  r"(?P<v>(?:as|at|with|in|for)\s+.+)$",
          stop=_STOP_JOB),
    _rule("work", rf"{_I}works?\s+{_FULL_TIME}(?P<v>(?:as|at|for|in|with|on\s+(?:an?|the))\s+.+)$",
          stop=_STOP_JOB),
    _rule("work", rf"{_IVE_BEEN}(?:working|employed)\s+{_FULL_TIME}(?P<v>(?:as|at|for|in|with)\s+.+)$",
          stop=_STOP_JOB),
    _rule("work", rf"{_IM}(?:working|employed|freelancing|interning)\s+{_FULL_TIME}"
                  r"(?P<v>(?:as|at|for|in|with|by)\s+.+)$",
          stop=_STOP_JOB),
    _rule("work", rf"{_I}(?:run|own|manage|co-own|co-founded|founded|opened)\s+"
                  rf"(?:an?\s+|my own\s+|our own\s+|the\s+|my\s+|our\s+){_REST}",
          _read_business),
    _rule("work", rf"{_I}teach\s+(?!(?:myself|me|you|yourself|ourselves|us|him|her|them|it)\b){_REST}",
          stop=_STOP_JOB, check=_is_short),
    _rule("work", rf"{_MY}(?:job|role|position|job title|title|profession|occupation)\s+is\s+{_REST}",
          stop=_STOP_JOB),
    _rule("work", rf"{_I}do\s+(?P<v>.+?)\s+for\s+a\s+living", stop=_STOP_JOB),
    _rule("work", rf"(?:{_IM}|{_IVE_BEEN})(?:an?|the)\s+(?:\d+[- ]year[- ]old\s+)?{_REST}", _read_job),
    # age
    _rule("age", rf"^{_BE}\s+(?P<v>{_AGE_WORDS})(?:\s+(?:years?|yrs?)(?:\s+old)?|\s*y/?o|\s+now|\s+this year|"
                 r"\s+today|\s+and counting|\s+next month)?$",
          _read_age),
    _rule("age", rf"{_I}turned\s+(?P<v>{_AGE_WORDS})(?![\w'])", _read_age),
    _rule("age", r"^(?:it's|it is|today is|today's)\s+my\s+(?P<v>\d{1,3})(?:st|nd|rd|th)\s+birthday",
          _read_age),
    _rule("age", rf"^{_BE}\s+(?:an?\s+)?(?P<v>\d{{1,3}})[- ]years?[- ]old(?![\w'])", _read_age),
    # where the user lives
    _rule("residence", rf"{_I}(?:live|reside)\s+with\s+.+?\s+(?:in|near)\s+{_REST}",
          stop=_STOP_PLACE, check=_is_place, key="residence"),
    _rule("residence", rf"{_I}(?:live|reside)\s+(?P<v>(?:in|on|at|near|outside(?:\s+of)?|"
                       r"just outside(?:\s+of)?|close to|by|next to)\s+.+)$",
          stop=_STOP_PLACE, check=lambda v, c: _is_place(v.split(None, 1)[-1], c), key="residence"),
    _rule("residence", rf"{_IHAVE}lived\s+(?:in|near)\s+(?P<v>.+?)\s+(?:for|since|all my life|my whole life|"
                       r"my entire life|all our lives|forever)(?![\w']).*$",
          _read_whole, check=_is_place, key="residence"),
    _rule("residence", rf"{_IM}(?:living|based|located|settled|stationed)\s+"
                       rf"(?:in|out of|near|outside(?:\s+of)?)\s+{_REST}",
          stop=_STOP_PLACE, check=_is_place, key="residence"),
    _rule("residence", rf"{_I}(?:moved|relocated|emigrated|immigrated)\s+(?:back\s+|over\s+|here\s+|out\s+)?"
                       rf"(?:to|in)\s+{_REST}",
          stop=_STOP_PLACE, check=_is_place, key="residence"),
    _rule("residence", r"^i\s+call\s+(?P<v>.+?)\s+home$", check=_is_place, key="residence"),
    _rule("residence", rf"{_IM}in\s+(?P<v>[^\W\d_][\w'-]*(?:\s+[^\W\d_][\w'-]*)?)"
                       r"(?=$|\s+(?:so|and|but|now|these days)\b|,)",
          stop=_STOP_PLACE, check=_is_here, key="residence"),
    # where the user comes from
    _rule("origin", rf"{_IM}(?:born and raised\s+|originally\s+)?from\s+{_REST}",
          stop=_STOP_PLACE, check=_is_proper_place),
    _rule("origin", rf"{_I}(?:grew up|was born(?:\s+and\s+raised)?|was raised|were born|were raised|"
                    rf"was brought up)\s+(?:in|on|near|outside(?:\s+of)?)\s+{_REST}",
          stop=_STOP_PLACE, check=_is_place),
    _rule("origin", rf"^(?:born and raised|born|raised)\s+in\s+{_REST}",
          stop=_STOP_PLACE, check=_is_proper_place),
    _rule("origin", rf"{_I}come\s+from\s+{_REST}", stop=_STOP_PLACE, check=_is_proper_place),
    _rule("origin", rf"{_IM}(?:(?:half|a quarter|part|proudly|fully)\s+)?(?P<v>{_alt(_DEMONYMS)}(?:-[\w]+)?)"
                    r"(?:\s+(?:on my \w+'s side|by birth|originally|through and through))?$"),
    # plans
    _rule("plan", rf"{_IM}(?:going|flying|heading|travell?ing|driving|off|jetting|sailing|moving|"
                  rf"relocating)\s+(?:off\s+)?(?:back\s+)?to\s+{_REST}",
          stop=_STOP_PLAN, check=_is_proper_place),
    _rule("plan", rf"{_IM}(?:going to|gonna)\s+(?P<v>(?!be\b)\w+\s.+)$", stop=_STOP_PLAN, check=_is_future),
    _rule("plan", rf"{_I}(?:plan|intend|aim)\s+to\s+{_REST}", stop=_STOP_PLAN,
          check=lambda v, c: not _OBJECT_PRONOUNS.match(v)),
    _rule("plan", rf"{_I}(?:hope|want)\s+to\s+(?P<v>(?:learn|visit|move|travel|retire|become|adopt|"
                  r"climb|hike|run a|open a|start a|buy a house|buy a flat|go back to|have (?:a baby|kids))"
                  r"\s.+)$",
          stop=_STOP_PLAN),
    _rule("plan", rf"{_IM}planning\s+(?P<v>(?:an?|my|our|the)\s+.+)$", stop=_STOP_PLAN),
    _rule("plan", rf"{_IM}(?P<v>(?:getting married|having a baby|expecting\s+(?:a baby|a child|twins|"
                  r"our first|my first|a boy|a girl|baby)|due\s+(?:in|on|next|this|at the end))(?:\s.*)?)$",
          stop=_STOP_PLAN),
    _rule("plan", rf"{_IM}(?P<v>(?:visiting|starting|retiring|graduating|leaving for)\s.+)$",
          stop=_STOP_PLAN, check=_is_future),
    _rule("plan", rf"^{_SUBJ}\s*(?:'ll|\s+will|\s+shall)\s+{_ADV}(?P<v>(?:be\s+(?:in|at|moving|starting|"
                  r"flying|visiting|traveling|travelling|going|away|off|back)|start|move|visit|fly|travel|begin|"
                  r"join|graduate|retire|turn|marry|finish)\s.+)$",
          stop=_STOP_PLAN, check=_is_future),
    _rule("plan", rf"{_I}(?:signed up|registered|enrolled|applied|booked)\s+"
                  r"(?P<v>(?:for|in|to|an?|my|our)\s+.+)$",
          stop=_STOP_PLAN),
    _rule("plan", r"^(?:my|our|the)\s+(?:[\w'-]+\s+)?(?P<v>flight|trip|wedding|honeymoon|move|surgery|"
                  r"operation|interview|exam|exams|due date|vacation|holiday|appointment|conference|race|"
                  r"marathon|"
                  r"graduation|party)(?:\s+[\w'-]+)*?\s+(?:is|are|'s)\s+.+$",
          _read_occasion, stop=_STOP_PLAN),
    _rule("plan", rf"{_MY}(?:plan|goal|dream|resolution|new year's resolution|aim)"
                  rf"(?:\s+for\s+(?:this|next)\s+\w+|\s+this\s+year|\s+for\s+the\s+year)?\s+is\s+to\s+{_REST}",
          stop=_STOP_PLAN),
    _rule("plan", rf"{_IHAVE}(?:an?|my|our)\s+(?P<v>(?:[\w'-]+\s+)*?(?:trip|flight|vacation|holiday|"
                  r"interview|wedding|appointment|exam|surgery|operation|conference|race|marathon|recital|audition|match|"
                  r"tournament)(?![\w']).*)$",
          stop=_STOP_PLAN, check=_is_future),
    # possessions
    _rule("possession", rf"{_I}(?:drive|ride|own)\s+(?P<v>(?:an?|the|two|my|our|\d+)\s+.+)$",
          check=_is_vehicle),
    _rule("possession", rf"{_MY}(?:car|ride|truck|bike|motorcycle|van)(?:\s+is|'s)\s+(?P<v>an?\s+.+)$"),
    _rule("possession", rf"{_I}(?:bought|purchased|inherited|built|got)\s+(?:an?|my|our|the)\s+{_REST}",
          check=_is_owned),
    # events
    _rule("event", rf"{_I}got\s+(?P<v>(?:married|engaged|divorced|promoted|a promotion|hired|fired|laid off|"
                   r"let go|my (?:driver'?s|driving) licen[cs]e|my (?:phd|degree|masters?|master's|diploma|"
                   r"citizenship|green card|visa|black belt)|accepted (?:to|into|at))(?![\w']).*)$"),
    _rule("event", rf"{_I}(?:had|welcomed)\s+(?:an?\s+|my\s+|our\s+)?(?P<v>(?:baby|twins|surgery|"
                   r"first (?:child|baby)|operation|(?:baby|little)\s+(?:boy|girl))(?![\w']).*)$"),
    _rule("event", rf"{_I}(?:ran|finished|completed|did|won)\s+(?:my\s+|our\s+|an?\s+|the\s+)?"
                   r"(?:first\s+|second\s+)?(?P<v>(?:[\w'-]+\s+)?(?:(?:half[- ])?marathon|ultra(?:marathon)?|"
                   r"triathlon|ironman|5k|10k)(?![\w']).*)$"),
    _rule("event", rf"{_I}(?:passed|aced)\s+(?P<v>(?:my|the|an?)\s+.*(?:exam|test|bar|boards))"),
    _rule("event", rf"{_I}(?:broke|fractured|sprained|tore|dislocated)\s+my\s+{_REST}"),
    _rule("event", rf"{_I}(?:lost|quit|left)\s+(?P<v>my\s+(?:job|position)(?![\w']).*)$"),
    _rule("event", rf"{_I}(?P<v>retired(?:\s.*)?)$"),
    _rule("event", rf"{_I}(?:won|was awarded|got awarded)\s+(?P<v>.+(?:award|prize|medal|scholarship|grant|"
                   r"competition|championship|lottery|tournament))"),
    # pets
    _rule("pet", rf"{_MY}(?P<rel>{_A_FEW}{_PET})(?:'s\s+name\s+is|\s+is\s+(?:named|called))\s+{_REST}",
          _read_named),
    _rule("pet", rf"{_I}(?:adopted|got|rescued|brought home|took in)\s+"
                 rf"(?P<v>(?:an?|two|three|our|my|another)\s+(?:[\w'-]+\s+){{0,3}}?{_PET}(?:\s+(?:named|called)\s+[^\W\d_][\w'-]*)?)"),
    _rule("pet", rf"{_MY}(?P<kind>(?:(?:{_COUNT})\s+)?{_A_FEW}{_PET})(?:\s*,\s*|\s+|$)(?P<after>.*)$",
          _read_pet),
    # relatives
    _rule("relationship", rf"{_MY}(?P<rel>{_A_FEW}{_REL})"
                          rf"(?:'s\s+name\s+is|'s\s+called|\s+is\s+(?:named|called))\s+{_REST}",
          _read_named),
    _rule("relationship", rf"{_MY}{_A_FEW}{_REL}'s?\s+(?!name\b)[\w' -]+?\s+(?:is|are|was)\s+{_REST}"),
    _rule("relationship", rf"{_MY}(?P<rel>(?:(?:{_COUNT})\s+)?{_A_FEW}{_REL})(?:\s*,\s*|\s+|$)(?P<after>.*)$",
          _read_relative),
    # what the user has: relatives, pets, possessions ("we have two kids and a dog named Rex")
    _rule("relationship", rf"{_IHAVE}(?P<v>(?:(?:{_COUNT})\s|(?!(?:no|not|any|zero)\b)(?:[\w'-]+\s+)?"
                          rf"{_alt(_PLURAL_RELATIVES)}).*)$",
          _read_have),
    # name
    _rule("name", r"^(?:my\s+)?(?:full\s+|real\s+|first\s+)?name(?:\s+is|'s)\s+(?P<v>.+)$", _read_name),
    _rule("name", r"^(?:(?:you can|you may|please|feel free to|everyone|everybody|people|most people|"
                  r"my friends|friends|they|folks)\s+)?(?:just\s+|usually\s+|all\s+|always\s+)?"
                  r"calls?\s+me\s+(?P<v>.+)$",
          _read_name, key="nickname"),
    _rule("name", rf"^{_SUBJ}\s+(?:usually\s+|mostly\s+|just\s+)?go\s+by\s+(?P<v>.+)$",
          _read_name, key="nickname"),
    _rule("name", r"^(?:i'm|i am)\s+(?P<v>[^\W\d_][\w'-]*(?:\s+[^\W\d_][\w'-]*){0,2})$", _read_introduction),
)


def _match_rules(clause: str) -> list[_Statement]:
    """The statements of the first rule (in ``_RULES`` order) that reads the clause."""
    for rule in _RULES:
        m = rule.pattern.match(clause)
        if m is not None:
            found = rule.read(rule, m, clause)
            if found:
                return found
    return []


def _read_clause(clause: str) -> list[_Statement]:
    """A clause's statements: none for a conditional or hedged clause; else its rule's,
    and the relatives and pets it mentions on the way."""
    clause = _strip_clause(clause)
    if not clause or _CONDITIONAL_CLAUSE.match(clause):
        return []
    clause = _IF_TAIL.sub("", clause)
    if _HEDGE.search(clause):
        return []
    found = _match_rules(clause)
    return found + _embedded(clause, found)


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith("?") or _QUESTION_START.match(_strip_clause(sentence)) is not None


def _read_text(text: str) -> list[tuple[_Statement, bool]]:
    """Every statement in a user's message, each with whether it was explicitly asked
    to be remembered."""
    out: list[tuple[_Statement, bool]] = []
    for sentence in _sentences(text):
        request = _REQUEST.match(_DISCOURSE.sub("", sentence))
        if request is not None and not _NOT_A_BODY.match(request.group("body")):
            body, couples = _couples(_BODY_TAIL.sub("", request.group("body")))
            out.extend((s, True) for s in couples)
            for i, clause in enumerate(_clauses(body)):
                found = _read_clause(clause)
                if found:
                    out.extend((s, True) for s in found)
                elif (i == 0 or _FIRST_PERSON.search(clause)) and _is_note(clause):
                    out.append((_Statement("note", clause, _third_person(clause), "note"), True))
            continue
        if _is_question(sentence) or _CONDITIONAL_SENTENCE.match(_DISCOURSE.sub("", sentence)) or \
                _SARCASM.search(sentence):
            continue
        rewritten, couples = _couples(sentence)
        out.extend((s, False) for s in couples)
        for clause in _clauses(rewritten):
            out.extend((s, False) for s in _read_clause(clause))
    return out


def _is_note(clause: str) -> bool:
    clause = _strip_clause(clause)
    return len(clause.split()) >= 2 and not _HEDGE.search(clause) and not _QUESTION_START.match(clause)


def _read_memory(content: str, names: Sequence[str] = ()) -> list[_Statement]:
    """The statements of a memory's text, whether about "the user" (as this extractor
    and a model write them) or in the user's own first person."""
    out: list[_Statement] = []
    for sentence in _sentences(content):
        if _is_question(sentence):
            continue
        for clause in _clauses(_first_person(sentence, names)):
            out.extend(_read_clause(clause))
    return out


def slot_of(fact: ExtractedFact) -> str:
    """The slot (one of ``SLOTS``) a fact fills, read from its content with the same
    rules that found it: "The user lives in Berlin." -> ``residence``; ``note`` when
    no rule reads it."""
    found = _read_memory(fact.content)
    return found[0].slot if found else "note"


# -- relations ------------------------------------------------------------------------------------
_UNINFORMATIVE: Final = frozenset(_words(
    "a, an, the, my, their, our, i, me, user, users, user's, just, really, currently, now, also, still, "
    "probably, very, actually, recently, absolutely, definitely"))


def _norm(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).replace("'", "")
    return " ".join(w for w in re.split(r"[^\w]+", plain) if w and w not in _UNINFORMATIVE)


def _covers(outer: str, inner: str) -> bool:
    small = _norm(inner)
    return bool(small) and f" {small} " in f" {_norm(outer)} "


_VALUE_SLOTS: Final = frozenset({"likes", "dislikes", "diet", "health", "language", "origin", "education",
                                 "possession"})
"""Multi-valued slots whose value alone carries the fact ("likes pizza" = "loves pizza")."""


def _relate(statement: _Statement,
            known: Sequence[tuple[int, _Statement]]) -> tuple[Relation | None, int | None]:
    """How a new statement stands to the offered memories read as statements: the same
    value (or content) again is a duplicate; a new value of a single-valued slot
    updates the first memory holding that slot; a multi-valued statement that
    contains an offered one extends it; otherwise none."""
    same = [(number, old) for number, old in known if old.slot == statement.slot]
    if statement.slot in SINGLE_VALUED:
        for number, old in same:
            if old.key == statement.key and _covers(old.value, statement.value):
                return "duplicate", number
        for number, old in same:
            if old.key == statement.key:
                return "updates", number
        return None, None
    by_value = statement.slot in _VALUE_SLOTS
    for number, old in same:
        if _covers(old.content, statement.content) or (by_value and _covers(old.value, statement.value)):
            return "duplicate", number
    for number, old in same:
        if _covers(statement.content, old.content) or (by_value and _covers(statement.value, old.value)):
            return "extends", number
    return None, None


# -- entities -------------------------------------------------------------------------------------
_TOKEN: Final = re.compile(r"[^\W_][\w'.-]*|&")
_CONNECTORS: Final = frozenset(("of", "de", "da", "del", "van", "von", "la", "le", "du", "dos", "das", "&"))
_NOT_ENTITIES: Final = frozenset(("i", "i'm", "the", "my", "their", "they", "user", "a", "an", *_MONTHS))


def _entities(content: str, statement: _Statement) -> tuple[str, ...]:
    """Proper names in the content: runs of capitalised words, joined by "of", "de",
    "&" and the like ("University of Toronto", "St. Mary's" kept whole), a lone
    word's possessive dropped; and the value of a name, whatever its case."""
    body = re.sub(r"^The user(?:'s)?\s*", "", content)
    spans: list[tuple[int, int]] = []
    start = end = -1
    pending = False
    for m in _TOKEN.finditer(body):
        word = m.group(0).rstrip(".")
        if word[:1].isupper() and word.lower().removesuffix("'s") not in _NOT_ENTITIES:
            start, end, pending = (m.start() if start < 0 else start), m.end(), False
        elif start >= 0 and word.lower() in _CONNECTORS and not pending:
            pending = True
        else:
            if start >= 0:
                spans.append((start, end))
            start, pending = -1, False
    if start >= 0:
        spans.append((start, end))
    found = []
    for begin, finish in spans:
        text = body[begin:finish].rstrip(".,")
        if " " not in text:
            text = text.removesuffix("'s")
        found.append(text)
    named = statement.slot in {"relationship", "pet"} and statement.value[:1].isupper()
    if statement.slot == "name" or named:
        found.insert(0, statement.value)
    return tuple(dict.fromkeys(f for f in found if f))


# -- the extractor --------------------------------------------------------------------------------
class RulesExtractor:
    """The ``Extractor`` without a model: deterministic, no I/O, cheap enough to run on
    every turn. Marks its facts ``rules``."""

    @property
    def name(self) -> str:
        return "rules"

    def extract(self, request: ExtractionRequest) -> ExtractionResult:
        names = tuple(dict.fromkeys(m.speaker for m in request.messages if m.role == "user" and m.speaker))
        known = [(memory.number, statement) for memory in request.offered
                 for statement in _read_memory(memory.content, names)]
        facts: dict[str, ExtractedFact] = {}
        for message in request.messages:
            if message.role != "user":  # the assistant's, the system's and tools' words are no source
                continue
            for statement, explicit in _read_text(strip_injected(message.text)):
                key = _norm(statement.content)
                said = facts.get(key)
                if said is None:
                    facts[key] = _fact(statement, explicit, message, known, request.categories)
                elif message.position not in said.messages:
                    facts[key] = msgspec.structs.replace(said, messages=(*said.messages, message.position))
        return ExtractionResult(facts=list(facts.values()), extractor=self.name)


def _fact(statement: _Statement, explicit: bool, message: SourceMessage,
          known: Sequence[tuple[int, _Statement]], catalog: dict[str, str]) -> ExtractedFact:
    """The fact of a statement: the slot's kind, categories (those in the request's
    catalog, when it has one) and importance (raised when asked to remember)."""
    slot = _SLOTS[statement.slot]
    confidence = [(category, _EXPLICIT_CONFIDENCE if explicit else value)
                  for category, value in zip(slot.categories, slot.confidences, strict=True)
                  if not catalog or category in catalog]
    relation, target = _relate(statement, known)
    return ExtractedFact(
        content=statement.content, kind=slot.kind,
        categories=tuple(c for c, _ in confidence), confidences=tuple(v for _, v in confidence),
        importance=max(slot.importance, _EXPLICIT_IMPORTANCE) if explicit else slot.importance,
        entities=_entities(statement.content, statement), relation=relation, target=target,
        attributed_to="user", valid_at=message.time or None, messages=(message.position,))
