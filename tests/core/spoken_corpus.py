"""A corpus of spoken answers, directives and values, written as speech engines write them
(case, punctuation, fillers, stutters, run-ons), with their labels. tests/core/
test_spoken_corpus.py runs every item through a live daemon (issue 38 item 7).

Answer labels: yes, no (clear cases), wait (the question stays), unclear (it stays; lmd says
what it heard), task (no answer: a new request).
"""

from __future__ import annotations


def _items(block: str) -> list[tuple[str, str]]:
    out = []
    for line in block.strip().splitlines():
        label, _, text = line.partition("|")
        out.append((label.strip(), text))
    return out


ANSWERS = _items(
    """
yes|yes
yes|Yes.
yes|Yes!
yes|YES
yes|yes.
yes|Yes, please.
yes|yes please
yes|Yeah.
yes|yeah
yes|Yeah, sure.
yes|Yep.
yes|yep
yes|Yup.
yes|Sure.
yes|sure
yes|Sure thing.
yes|Sure, go ahead.
yes|OK.
yes|Ok
yes|okay
yes|Okay.
yes|Okay, go ahead.
yes|Alright.
yes|All right.
yes|All right, do it.
yes|Fine.
yes|That's fine.
yes|Yes, that's fine.
yes|Thats fine
yes|That's OK.
yes|Um, yes.
yes|Uh, yes.
yes|Um... yes.
yes|Uh yeah
yes|Er, yes please.
yes|Hmm, okay.
yes|Well, yes.
yes|Oh, yes.
yes|So yes.
yes|Y-yes.
yes|y-yeah
yes|Yes yes.
yes|Yes, yes, yes.
yes|Yeah yeah, go ahead.
yes|Go for it.
yes|go for it
yes|Go ahead.
yes|go ahead
yes|Go ahead and run it.
yes|Go ahead, please.
yes|Go.
yes|Go on.
yes|Do it.
yes|do it
yes|Just do it.
yes|Do it now.
yes|Please do.
yes|Run it.
yes|run it please
yes|Yes, run it.
yes|Yes please, run it.
yes|Run that.
yes|Execute it.
yes|Proceed.
yes|proceed
yes|Please proceed.
yes|Continue.
yes|Carry on.
yes|Sounds good.
yes|sounds good
yes|Sounds great.
yes|Sounds good to me.
yes|Looks good.
yes|Looks good to me.
yes|Looks fine.
yes|All good.
yes|Good to go.
yes|Yes, sounds good.
yes|Approved.
yes|I approve.
yes|Confirm.
yes|Confirmed.
yes|Affirmative.
yes|Absolutely.
yes|Absolutely, go ahead.
yes|Definitely.
yes|Certainly.
yes|Of course.
yes|Of course, go ahead.
yes|Correct.
yes|Exactly.
yes|Indeed.
yes|No problem.
yes|No problem, go ahead.
yes|No worries, do it.
yes|You bet.
yes|By all means.
yes|I agree.
yes|Agreed.
yes|Yes, I'm sure.
yes|For sure.
yes|Totally.
yes|Roger.
yes|Roger that.
yes|Yes sir.
yes|Yes, thank you.
yes|Yes, thanks.
yes|Thanks, go ahead.
yes|Okay, thanks.
yes|Yes marat.
yes|Make it so.
yes|Let's do it.
yes|Let's go.
yes|lets do it
yes|Right away.
yes|Okay then.
yes|Alright then, go.
yes|Yeah, go for it.
yes|Yeah, that works.
yes|That works.
yes|Works for me.
yes|Fine by me.
yes|I'm okay with that.
yes|Yes. Yes. Do it.
yes|YES PLEASE
yes|Yes!!!
yes|Yes…
yes|yes, just run it
yes|Sure, run it.
yes|Perfect, go ahead.
yes|Great, do it.
no|no
no|No.
no|No!
no|NO
no|No, thanks.
no|No thanks.
no|No thank you.
no|Nope.
no|nope
no|Nah.
no|Nah, thanks.
no|No, cancel.
no|Cancel.
no|cancel that
no|Cancel it, please.
no|Stop.
no|Stop it.
no|Abort.
no|Don't.
no|Don't run it.
no|Do not run it.
no|dont run that
no|Don't do it.
no|Please don't.
no|No, don't.
no|No, don't run it.
no|Never.
no|Never mind.
no|nevermind
no|Forget it.
no|Forget about it.
no|Skip it.
no|Skip.
no|Negative.
no|Declined.
no|I refuse.
no|I don't think so.
no|I'd rather not.
no|Better not.
no|Definitely not.
no|Absolutely not.
no|Of course not.
no|No way.
no|Not really.
no|Hell no.
no|Leave it.
no|Drop it.
no|I changed my mind.
no|Um, no.
no|Uh, no thanks.
no|Well, no.
no|N-no.
no|No, no.
no|No no no.
no|Nope, cancel.
no|No! Stop!
no|No, never mind.
no|Not that.
no|Not that one.
yes|Yeah go ahead.
yes|Yes, do it please.
yes|Sure, go ahead and do that.
yes|Yep, sounds good to me.
yes|OK, let's do it.
yes|Fine, go ahead.
yes|Alright, run it.
yes|Yes, please go ahead.
yes|Go for it!
yes|Definitely, go ahead.
yes|Okay, sure.
yes|Yes, absolutely.
yes|Sure thing, go for it.
yes|Yeah, that's right.
yes|That's right.
yes|Yes, correct.
yes|Uh, sure.
yes|Okay, do that.
yes|Please go ahead.
yes|Yes, go.
yes|Yes, please do that.
yes|Yes, I confirm.
yes|I'm fine with that.
yes|That sounds fine.
yes|Go right ahead.
yes|Do that.
yes|Yes, do that now.
yes|Yeah, do it.
yes|Yup, go.
yes|Ok go
yes|yes go ahead please
yes|Yes, that is correct.
yes|Sure, that works.
yes|OK, that's fine, go ahead.
yes|Yes, execute it.
yes|Affirmative, go ahead.
yes|Yes, yes, go ahead.
yes|Sure, sounds good.
yes|Yeah sure
yes|Yeah okay
yes|yes ok
yes|Okey dokey.
yes|Yes, you can.
yes|You can.
yes|Yes, you may.
yes|Go ahead and do it.
yes|Yeah, let's go.
yes|Yes, proceed.
yes|Mhm, yes.
yes|Yes of course.
yes|Sure, of course.
no|No, don't do that.
no|Nope, not that.
no|No, please don't.
no|Cancel that.
no|No, stop.
no|Don't do that.
no|Nah, leave it.
no|No, I don't want that.
no|Please cancel.
no|No, skip it.
no|No, that's wrong.
no|That's wrong.
no|Wrong.
no|Stop, don't.
no|No, cancel it.
no|Nope, never mind.
no|No, forget it.
no|Absolutely not, no.
no|No, thank you.
no|Please don't run that.
no|No, don't run that command.
no|Do not do that.
no|Not that command.
no|I said no.
no|Incorrect.
no|No, abort.
no|No no, cancel.
no|Negative, cancel.
wait|wait
wait|Wait.
wait|Wait!
wait|Wait a moment.
wait|Wait a second.
wait|Wait a minute.
wait|Hold on.
wait|hold on
wait|Hold on a second.
wait|Hang on.
wait|Hang on a sec.
wait|Not yet.
wait|Not now.
wait|One moment.
wait|One second.
wait|One sec.
wait|Just a moment.
wait|Just a second.
wait|Give me a minute.
wait|Give me a second.
wait|Let me think.
wait|Let me check.
wait|Um, hold on.
wait|Uh, wait.
wait|Wait, wait.
wait|Hold up.
wait|Pause.
wait|Not so fast.
wait|Wait, what does it do?
wait|Hold on, what does that do?
wait|Wait, is that safe?
wait|Wait, will it delete anything?
wait|Hold on, why do you need that?
wait|What does it do?
wait|What does that command do?
wait|Is it safe?
wait|Why?
wait|Will it change anything?
wait|What will that do to my files?
wait|One moment, what is touch?
unclear|yeah, no
unclear|Yeah no.
unclear|Yes and no.
unclear|yes if it's safe
unclear|Yes, if it's safe.
unclear|sure, but use sudo
unclear|Sure, but with sudo.
unclear|yes, and then list the logs
unclear|Yes and also delete the old ones.
unclear|Yes, but only in the home folder.
unclear|Okay but first show me the file.
unclear|Yes, unless it deletes something.
unclear|Maybe.
unclear|Probably.
unclear|I guess so.
unclear|I think so.
unclear|I'm not sure.
unclear|Not sure.
unclear|Perhaps.
unclear|Whatever.
unclear|Up to you.
unclear|If you want.
unclear|Why not.
unclear|Sure, why not.
unclear|Uh-huh.
unclear|Mm-hmm.
unclear|Yes?
unclear|Okay?
unclear|Wait, yes.
unclear|No wait.
unclear|No, wait, yes.
unclear|Yes... no.
unclear|Okay no.
unclear|
unclear|y
unclear|n
unclear|k
unclear|.
unclear|Hmm.
unclear|Um.
unclear|Thanks.
unclear|Please.
unclear|👍
unclear|✅
unclear|Yes 👍
unclear|はい
unclear|Да.
unclear|是的
unclear|Sí.
unclear|Oui.
unclear|Ja.
unclear|Not yes.
unclear|Yes no maybe.
unclear|Sure, but not now.
unclear|No, list the logs instead.
unclear|No idea, list the files.
unclear|Yes, always for something else entirely and more.
task|list the logs
task|show me the disk usage
task|actually just list the files
task|what time is it in Tokyo
task|create a folder called notes
task|how many files are here
"""
)

# A run-on of 300 words that starts with a yes: too long to be one.
ANSWERS.append(("unclear", "Yes, " + " ".join(["and then do something else as well"] * 43)))

# (utterance, the mode it picks or "" for none: the default mode gets the whole utterance)
DIRECTIVES = [
    ("marat list the files", "marat"),
    ("Marat, list the files.", "marat"),
    ("MARAT: list the files", "marat"),
    ("Hey marat, list the files", "marat"),
    ("Hey Marat list the files", "marat"),
    ("OK marat, list the files", "marat"),
    ("Okay marat list the files", "marat"),
    ("Hi marat, list the files", "marat"),
    ("Hello marat, list the files", "marat"),
    ("Morat, list the files", "marat"),
    ("Hey Morat, list the files", "marat"),
    ("Maret list the files", "marat"),
    ("Murat, list the files", "marat"),
    ("Marrat, list the files", "marat"),
    ("Ma rat, list the files", "marat"),
    ("Marad, list the files", "marat"),
    ("dali tell me a joke", "dali"),
    ("Dali, tell me a joke.", "dali"),
    ("Hey dali, tell me a joke", "dali"),
    ("OK Dali tell me a joke", "dali"),
    ("Dolly, tell me a joke", "dali"),
    ("Dahli, tell me a joke", "dali"),
    ("Dalí, tell me a joke", "dali"),
    ("cobol help", "cobol"),
    ("Cobol, help.", "cobol"),
    ("Hey cobol, help", "cobol"),
    ("Kobol, help", "cobol"),
    ("Co bol help", "cobol"),
    ("Co ball, help", "cobol"),
    ("COBOL: help", "cobol"),
    ("knob list", "knob"),
    ("Knob, list.", "knob"),
    ("Nob list", "knob"),
    ("Knobs list", "knob"),
    ("Hey knob, list", "knob"),
    ("Okay knob list", "knob"),
    ("Knobb, list", "knob"),
    # content: ordinary words that sound like a directive, wake words before anything else
    ("Marathon results for this year", ""),
    ("Merit increases for the team", ""),
    ("Mara is my sister", ""),
    ("Cobble stones in the old town", ""),
    ("Cable prices went up", ""),
    ("Dahlia season is here", ""),
    ("Nab the last seat", ""),
    ("Hey, what is up", ""),
    ("OK, tell me a joke", ""),
    ("Hello there", ""),
    ("paint it like dali", ""),
    ("ask marat about it", ""),
    ("marat's opinion on pasta", ""),
    ("Marathons are long", ""),
    ("Knobbly knees", ""),
    ("Cobalt blue paint", ""),
    ("Molar pain remedies", ""),
    ("Dial my mother", ""),
    ("Dollar exchange rate", ""),
    ("Maybe later", ""),
    ("Ok", ""),
    ("Hey", ""),
    ("Hi", ""),
]

# (what follows "knob set max tokens to", the value it sets or None: asked, not guessed)
VALUES = [
    ("four thousand", 4000),
    ("four thousand five hundred, please", 4500),
    ("Four thousand five hundred.", 4500),
    ("forty three hundred", 4300),
    ("forty-three hundred", 4300),
    ("4,500", 4500),
    ("4500", 4500),
    ("4 500", None),
    ("four k", 4000),
    ("4k", 4000),
    ("4.5k", 4500),
    ("two thousand and fifty", 2050),
    ("two thousand fifty", 2050),
    ("a thousand", 1000),
    ("one thousand", 1000),
    ("twelve hundred", 1200),
    ("nineteen hundred", 1900),
    ("two hundred and fifty", 250),
    ("seven hundred", 700),
    ("eight oh eight oh", 8080),
    ("one two three four", 1234),
    ("nineteen eighty four", 1984),
    ("twenty twenty", 2020),
    ("three thousand, please", 3000),
    ("um, three thousand", 3000),
    ("exactly five thousand", 5000),
    ("5,000 tokens", 5000),
    ("five thousand tokens", 5000),
    ("four k tokens", 4000),
    ("one million", 1_000_000),
    ("1.5 million", 1_500_000),
    ("ten thousand", 10000),
    ("sixty four thousand", 64000),
    ("thirty two k", 32000),
    ("about four thousand", None),
    ("roughly five k", None),
    ("lots", None),
    ("a lot", None),
    ("more", None),
    ("twenty twenty twenty", None),
    ("four point", None),
    ("minus five", None),
    ("zero", None),
    ("five minutes", None),
    ("four thousand and change", None),
    ("", None),
    ("👍", None),
    ("四千", None),
    ("half", None),
    ("four thousand point five", None),
]
