"""MASBench surface forms (data): per-split templates with disjoint vocabularies and phrasings.

Train and test use disjoint template pools: each template has its own entity vocabulary and its own
sentence phrasings, and no entity word or phrasing is shared between the splits, so a model trained on
the train split is tested on unseen surface forms.
"""

from __future__ import annotations

from dataclasses import dataclass

from mas_orchestra.bench.masbench.graph import SPLITS, check_choice

__all__ = ["SPLIT_TEXT", "TEMPLATES", "SplitText", "Template", "templates"]

@dataclass(frozen=True)
class Template:
    """One surface form: how quantities are named and how each kind of sentence is phrased.

    Sentence phrasings use {Q} (the quantity, capitalised: "The number of ..."), {q} (lower case), {v} (a
    constant), {L} (inputs joined with "and"), {F} (the first input of a difference), {Ra} / {Rm} (the other
    inputs joined with "and" / "minus").

    Attributes:
        id: The template's id.
        split: The split it belongs to (``train`` or ``test``).
        name_format: How a quantity is named: slots {a}, {b}, {c} filled from the three vocabularies.
        a: The first vocabulary.
        b: The second vocabulary.
        c: The third vocabulary.
        intro: The question's opening sentence.
        ask: The sentence asking for a quantity ({q}).
        const: Phrasings of a constant.
        add: Phrasings of a sum.
        sub: Phrasings of a difference.
        mul: Phrasings of a product.
    """

    id: str
    split: str
    name_format: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    c: tuple[str, ...]
    intro: str
    ask: str
    const: tuple[str, ...]
    add: tuple[str, ...]
    sub: tuple[str, ...]
    mul: tuple[str, ...]

    def phrasings(self) -> list[str]:
        """Every sentence pattern of this template (for the split-disjointness check)."""
        return [self.intro, self.ask, *self.const, *self.add, *self.sub, *self.mul]

    def entities(self) -> list[str]:
        """Every vocabulary item of this template."""
        return [*self.a, *self.b, *self.c]


TEMPLATES: tuple[Template, ...] = (
    Template(
        id="train-t0",
        split="train",
        name_format="number of {a} {b} in {c}",
        a=("adult", "baby", "young", "elderly", "spotted", "striped"),
        b=("owls", "foxes", "otters", "lemurs", "pelicans", "tortoises", "meerkats", "flamingos", "badgers",
           "herons", "lynxes", "ibises"),
        c=("Maple Zoo", "Riverside Zoo", "Cedar Zoo", "Harbor Zoo", "Summit Zoo", "Willow Zoo", "Granite Zoo",
           "Aspen Zoo", "Coral Zoo", "Falcon Zoo"),
        intro="Every calculation here is carried out modulo 23.",
        ask="What is {q}?",
        const=("{Q} equals {v}.", "{Q} is exactly {v}."),
        add=("{Q} equals the sum of {L}.", "{Q} is the total of {L}."),
        sub=("{Q} equals {F} minus {Rm}.", "{Q} is what remains after taking {Ra} away from {F}."),
        mul=("{Q} equals the product of {L}.", "{Q} is {L} multiplied together."),
    ),
    Template(
        id="train-t1",
        split="train",
        name_format="number of {a} {b} on {c}",
        a=("ripe", "organic", "heirloom", "dwarf", "early", "late"),
        b=("apples", "pumpkins", "carrots", "melons", "pears", "turnips", "radishes", "plums", "cabbages",
           "beets", "figs", "leeks"),
        c=("Oakridge Farm", "Sunny Acres", "Hollow Creek Farm", "Bramble Farm", "Meadowbrook Farm",
           "Red Barn Farm", "Clover Hill Farm", "Stonefield Farm", "Juniper Farm", "Larkspur Farm"),
        intro="All of the arithmetic in this problem is done mod 23.",
        ask="Find {q}.",
        const=("{Q} is known to be {v}.", "We know that {q} is {v}."),
        add=("{Q} comes from adding up {L}.", "Adding {L} gives {q}."),
        sub=("{Q} is {F} reduced by {Ra}.", "Subtracting {Ra} from {F} gives {q}."),
        mul=("{Q} is obtained by multiplying {L}.", "Multiplying {L} gives {q}."),
    ),
    Template(
        id="train-t2",
        split="train",
        name_format="number of {b} in each {a} at {c}",
        a=("box", "crate", "shelf", "drawer", "bin", "basket"),
        b=("candles", "mugs", "notebooks", "scarves", "lamps", "kettles", "puzzles", "blankets", "teapots",
           "umbrellas", "wallets", "mittens"),
        c=("Elm Street Market", "Northside Bazaar", "Corner Emporium", "Lantern Shop", "Bluebell Store",
           "Pinecone Outlet", "Hilltop Mart", "Quayside Goods", "Saffron Trading Post", "Magpie Market"),
        intro="Treat every count as a number modulo 23.",
        ask="How large is {q}?",
        const=("{Q} has been recorded as {v}.", "According to the inventory, {q} is {v}."),
        add=("{Q} matches {L} combined.", "Combining {L} yields {q}."),
        sub=("{Q} is found by starting from {F} and removing {Ra}.", "Removing {Ra} from {F} leaves {q}."),
        mul=("{Q} is the result of multiplying {L}.", "The product formed by {L} gives {q}."),
    ),
    Template(
        id="train-t3",
        split="train",
        name_format="number of {a} {b} in {c}",
        a=("red", "white", "yellow", "purple", "pink", "orange"),
        b=("tulips", "roses", "daisies", "lilies", "orchids", "peonies", "poppies", "irises", "asters",
           "dahlias", "violets", "marigolds"),
        c=("Rose Park", "Lakeside Garden", "Ivy Court Garden", "Sunset Park", "Orchard Commons",
           "Fountain Square Garden", "Birchwood Park", "Mossy Glen Garden", "Heron Pond Park",
           "Windmill Garden"),
        intro="Work modulo 23 throughout.",
        ask="Determine {q}.",
        const=("{Q} stands at {v}.", "Records show {q} at {v}."),
        add=("{Q} is {L} added together.", "Summing {L} produces {q}."),
        sub=("{Q} is {F} less {Ra}.", "Taking {Ra} off {F} produces {q}."),
        mul=("{Q} is the multiplication of {L}.", "Multiplying together {L} produces {q}."),
    ),
    Template(
        id="test-t0",
        split="test",
        name_format="number of {b} in each {a} of {c}",
        a=("backpack", "pencil case", "locker", "desk", "cubby", "folder"),
        b=("pencils", "erasers", "rulers", "crayons", "markers", "staplers", "glue sticks", "protractors",
           "compasses", "sharpeners", "highlighters", "index cards"),
        c=("Central School", "Northview Academy", "Westbrook High", "Lincoln Elementary", "Bayview School",
           "Hillcrest Academy", "Evergreen School", "Ridgemont High", "Sycamore School", "Fairview Academy"),
        intro="All arithmetic below is done modulo 23.",
        ask="What does {q} equal?",
        const=("{Q} is {v}.", "{Q} amounts to {v}."),
        add=("{Q} is the sum of {L}.", "{Q} is the total count of {L}."),
        sub=("{Q} is {F} after subtracting {Ra}.", "{Q} equals {F} with {Ra} subtracted."),
        mul=("{Q} is the product of {L}.", "{Q} equals {L} multiplied by one another."),
    ),
    Template(
        id="test-t1",
        split="test",
        name_format="number of {a} {b} in {c}",
        a=("tall", "historic", "modern", "wooden", "brick", "glass"),
        b=("towers", "libraries", "bakeries", "cafes", "theaters", "museums", "bridges", "fountains",
           "cinemas", "hotels", "pharmacies", "galleries"),
        c=("Port Alder", "Silverton", "Brookhaven", "Eastmoor", "Kingsbridge", "Thornbury", "Glenville",
           "Marlow Bay", "Ashford", "Redcliffe"),
        intro="Every operation in this problem is taken mod 23.",
        ask="Compute {q}.",
        const=("{Q} totals {v}.", "It is given that {q} is {v}."),
        add=("{Q} is made up of {L} together.", "Put together, {L} make {q}."),
        sub=("{Q} is obtained when {Ra} is deducted from {F}.", "Deducting {Ra} from {F} results in {q}."),
        mul=("{Q} results from multiplying {L}.", "{Q} is formed by multiplying {L} together."),
    ),
    Template(
        id="test-t2",
        split="test",
        name_format="number of {a} {b} in {c}",
        a=("giant", "tiny", "silver", "golden", "juvenile", "deep-sea"),
        b=("octopuses", "jellyfish", "seahorses", "sharks", "crabs", "eels", "starfish", "rays", "clownfish",
           "lobsters", "squids", "turtles"),
        c=("Bluewater Aquarium", "Tidepool Aquarium", "Reef World", "Ocean Hall", "Kelp Forest Center",
           "Lagoon Aquarium", "Seaside Aquarium", "Pearl Bay Aquarium", "Abyssal Current Center",
           "Anchor Point Aquarium"),
        intro="Numbers here live in arithmetic modulo 23.",
        ask="Work out {q}.",
        const=("Observers count {q} as {v}.", "{Q} is reported to be {v}."),
        add=("{Q} is the combined count of {L}.", "Counting {L} together gives {q}."),
        sub=("{Q} equals what is left of {F} once {Ra} is excluded.", "Excluding {Ra} from {F} leaves {q}."),
        mul=("{Q} equals {L} multiplied with one another.", "The product of {L} is {q}."),
    ),
    Template(
        id="test-t3",
        split="test",
        name_format="number of {a} {b} at {c}",
        a=("electric", "vintage", "rental", "compact", "hybrid", "armored"),
        b=("bicycles", "scooters", "vans", "trucks", "buses", "tractors", "motorcycles", "forklifts", "trams",
           "minivans", "trailers", "ambulances"),
        c=("Northgate Depot", "Southpoint Garage", "Riverbend Yard", "Ironworks Depot", "Canal Row Garage",
           "Meridian Yard", "Foxglove Depot", "Tanner Lane Garage", "Beacon Yard", "Quarry Road Depot"),
        intro="Reduce every result modulo 23.",
        ask="Calculate {q}.",
        const=("{Q} is listed as {v}.", "The log says {q} is {v}."),
        add=("{Q} is the aggregate of {L}.", "Aggregating {L} results in {q}."),
        sub=("{Q} is what is left of {F} without {Ra}.", "If {Ra} is taken from {F}, what remains is {q}."),
        mul=("{Q} is the multiplied value of {L}.", "Multiplying out {L} results in {q}."),
    ),
)


@dataclass(frozen=True)
class SplitText:
    """Per-split phrasings that are not tied to one template.

    Attributes:
        single_instruction: Ends a one-answer question (how to report the result).
        multi_instruction: Ends a several-answer question.
        problem_header: Heads each task of a several-answer question (``{i}``: its number).
        horizon_hint: Explains the ``[answerN]`` tags of the horizon axis.
        notes: Distractor notes of the robustness axis; each must contain ``{q} is {v}`` (verify() looks for it).
        fillers: Irrelevant sentences of the robustness axis.
    """

    single_instruction: str
    multi_instruction: str
    problem_header: str
    horizon_hint: str
    notes: tuple[str, ...]
    fillers: tuple[str, ...]


SPLIT_TEXT: dict[str, SplitText] = {
    "train": SplitText(
        single_instruction="Report the result modulo 23 inside \\boxed{}.",
        multi_instruction="Report every result modulo 23, each inside its own \\boxed{}, in the order asked.",
        problem_header="Task {i}:",
        horizon_hint="A tag such as [answer1] refers to the result of task 1.",
        notes=(
            "(warning: check the facts before relying on them — a passer-by insists that {q} is {v}.)",
            "(caution: double-check this before you use it — a rumour says {q} is {v}.)",
        ),
        fillers=(
            "The morning train left the station a few minutes late.",
            "A light rain fell over the hills during the afternoon.",
            "The town council debated the colour of the new benches.",
            "Somebody left a red umbrella by the front door.",
            "The bakery on the corner sells bread with a thick crust.",
            "A kite got stuck in the branches of the oak tree.",
            "The river was unusually calm that evening.",
            "Several neighbours gathered to watch the fireworks.",
            "The museum extended its opening hours for the holidays.",
            "An old piano stood in the hallway, slightly out of tune.",
            "The postman whistled a cheerful tune on his round.",
            "Clouds drifted slowly across the pale sky.",
            "The library smelled faintly of dust and old paper.",
            "A stray cat slept in the warm window box.",
            "The market stalls were packed away before sunset.",
            "The choir practised in the chapel every Thursday.",
            "A cold wind rattled the shutters all night.",
            "The village fair was postponed because of the weather.",
            "Fresh paint still covered the railings of the bridge.",
            "The lighthouse keeper kept a diary of passing ships.",
            "A group of cyclists stopped for lunch at the inn.",
            "The gardener trimmed the hedges into neat shapes.",
            "Snow had settled on the distant mountain tops.",
            "The clock tower chimed a little before the hour.",
        ),
    ),
    "test": SplitText(
        single_instruction="Give the answer mod 23 as \\boxed{}.",
        multi_instruction="Give each answer mod 23 in its own \\boxed{}, in order.",
        problem_header="Problem {i}:",
        horizon_hint="In later problems, [answerN] stands for your answer to problem N.",
        notes=(
            "(note: verify the information before you take it — someone claims {q} is {v}.)",
            "(note: verify the information before you take it — a message insists {q} is {v}.)",
        ),
        fillers=(
            "The harbour ferry was repainted bright blue last spring.",
            "A heavy fog rolled in from the sea before dawn.",
            "Two friends argued about the best route to the coast.",
            "The observatory dome opened just after dusk.",
            "A brass band rehearsed in the park on weekends.",
            "The orchard was quiet except for the bees.",
            "Someone had chalked a hopscotch grid on the pavement.",
            "The tram rattled past the cathedral square.",
            "A parcel arrived wrapped in brown paper and string.",
            "The mayor cut a ribbon at the new community hall.",
            "Thunder rumbled somewhere far beyond the valley.",
            "The café served soup in wide ceramic bowls.",
            "Autumn leaves blocked the drain at the end of the lane.",
            "A violinist busked outside the railway station.",
            "The ice on the pond was too thin to walk on.",
            "An owl called twice from the edge of the woods.",
            "The festival lanterns were hung along the canal.",
            "A painter sketched the skyline from a rooftop.",
            "The bookshop cat refused to leave the sunny shelf.",
            "Waves broke gently against the old stone pier.",
            "The farmers' cooperative met in the village barn.",
            "A kettle whistled in a kitchen down the hall.",
            "The night bus was almost empty on the way home.",
            "Sunflowers leaned toward the afternoon light.",
        ),
    ),
}


def templates(split: str) -> list[Template]:
    """The templates of one split.

    Args:
        split: ``train`` or ``test``.

    Raises:
        ValueError: An unknown split.
    """
    check_choice("split", split, SPLITS)
    return [t for t in TEMPLATES if t.split == split]
